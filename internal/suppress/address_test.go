package suppress

import (
	"encoding/json"
	"net/mail"
	"os"
	"strings"
	"testing"
)

// formCase is one row of testdata/forms.json, the table of address forms
// that the Go and SQL tests of the address rule share.
type formCase struct {
	Form   string `json:"form"`
	Normal string `json:"normal"` // "": refused
	API    bool   `json:"api"`    // net/mail accepts it
	Why    string `json:"why"`
	Note   string `json:"note"`
}

func loadForms(t testing.TB) []formCase {
	t.Helper()
	b, err := os.ReadFile("testdata/forms.json")
	if err != nil {
		t.Fatal(err)
	}
	var all []formCase
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var out []formCase
	for _, c := range all {
		if c.Form != "" {
			out = append(out, c)
		}
	}
	return out
}

// TestAddressForms checks Address against the table, and that every form
// it accepts means to the API's parser (net/mail, as the fake API uses it)
// the address it normalises to: a form Address reads differently from the
// API is a form whose suppressed address gets mailed.
func TestAddressForms(t *testing.T) {
	for _, c := range loadForms(t) {
		if got := Address(c.Form); got != c.Normal {
			t.Errorf("Address(%q) = %q, want %q", c.Form, got, c.Normal)
		}
		a, err := mail.ParseAddress(c.Form)
		if (err == nil) != c.API {
			t.Errorf("net/mail.ParseAddress(%q): %v; the table says the API accepts it: %v", c.Form, err, c.API)
		}
		if c.Normal != "" && (err != nil || strings.ToLower(a.Address) != c.Normal) {
			t.Errorf("%q is accepted as %q, but the API's parser reads it as %v (%v)", c.Form, c.Normal, a, err)
		}
	}
}

// FuzzAddress: whatever Address accepts, the API's parser reads as the
// same address, and a normal form is its own normal form.
func FuzzAddress(f *testing.F) {
	for _, c := range loadForms(f) {
		f.Add(c.Form)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Address(s)
		if n == "" {
			return
		}
		a, err := mail.ParseAddress(s)
		if err != nil {
			t.Fatalf("Address(%q) = %q, but the API's parser refuses it: %v", s, n, err)
		}
		if got := strings.ToLower(a.Address); got != n {
			t.Fatalf("Address(%q) = %q, but the API's parser reads %q", s, n, a.Address)
		}
		if again := Address(n); again != n {
			t.Fatalf("Address(%q) = %q, not its own normal form", n, again)
		}
	})
}
