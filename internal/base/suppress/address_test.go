package suppress

import (
	"fmt"
	"net/mail"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sendonce/sendonce/internal/testkit/addrforms"
)

// TestAddressForms checks Address against the table, and that every form
// it accepts means to the API's parser (net/mail, as the fake API uses it)
// the address it normalises to: a form Address reads differently from the
// API is a form whose suppressed address gets mailed.
func TestAddressForms(t *testing.T) {
	for _, c := range addrforms.Load(t) {
		if got := Address(c.Form); got != c.Normal {
			t.Errorf("Address(%q) = %q, want %q", c.Form, got, c.Normal)
		}
		if got := byExpression(c.Form); got != c.Normal {
			t.Errorf("by the expression, %q reads %q, want %q", c.Form, got, c.Normal)
		}
		a, err := mail.ParseAddress(c.Form)
		if (err == nil) != c.API {
			t.Errorf("net/mail.ParseAddress(%q): %v; the table says the API accepts it: %v", c.Form, err, c.API)
		}
		if c.Normal != "" && !charsetOnly(err) && (err != nil || strings.ToLower(a.Address) != c.Normal) {
			t.Errorf("%q is accepted as %q, but the API's parser reads it as %v (%v)", c.Form, c.Normal, a, err)
		}
	}
}

// charsetOnly reports whether net/mail refused a spelling only for an
// RFC 2047 encoded word in its display name whose charset it does not
// decode (only UTF-8, ISO-8859-1 and US-ASCII): the rule takes such a name
// (the address is not in doubt, and spelling out which encoded words
// net/mail decodes is no business of a pattern PostgreSQL must share); the
// API refuses the send, and the intent fails, without mailing anyone.
func charsetOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "charset not supported")
}

// byExpression is Address by formRE, the expression sendonce_address runs
// in PostgreSQL, where Address runs spell.
func byExpression(a string) string {
	m := form.FindStringSubmatch(a)
	if !utf8.ValidString(a) || m == nil || len(m[1]+m[2]) > MaxAddress {
		return ""
	}
	return strings.ToLower(m[1] + m[2])
}

// FuzzAddress: Address reads every string as the expression does; what it
// accepts, the API's parser reads as the same address; a normal form is
// its own normal form.
func FuzzAddress(f *testing.F) {
	for _, c := range addrforms.Load(f) {
		f.Add(c.Form)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Address(s)
		if ref := byExpression(s); n != ref {
			t.Fatalf("Address(%q) = %q, but the expression PostgreSQL runs reads %q", s, n, ref)
		}
		if n == "" {
			return
		}
		a, err := mail.ParseAddress(s)
		if charsetOnly(err) {
			return
		}
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

// TestPatternMatchesMigration: the pattern sendonce_address_spelled uses in
// SQL is Go's formRE, with the character ranges beyond ASCII written as
// PostgreSQL writes them (\u00A1 for \x{A1}). The table and the generated
// strings of outbox's tests check what the two do; this checks they are
// one text, so a change to one alone fails here first.
func TestPatternMatchesMigration(t *testing.T) {
	files, err := filepath.Glob("../../../migrations/sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var sqlRE string
	for _, f := range files { // in version order: the last definition wins
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		if _, def, ok := strings.Cut(up, "FUNCTION sendonce_address_spelled("); ok {
			_, re, _ := strings.Cut(def, "$re$")
			sqlRE, _, _ = strings.Cut(re, "$re$")
		}
	}
	if sqlRE == "" {
		t.Fatal("no migration defines sendonce_address_spelled with a $re$ pattern")
	}
	want := regexp.MustCompile(`\\x\{([0-9A-F]+)\}`).ReplaceAllStringFunc(formRE, func(esc string) string {
		n, err := strconv.ParseUint(esc[3:len(esc)-1], 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0xFFFF {
			return fmt.Sprintf(`\U%08X`, n)
		}
		return fmt.Sprintf(`\u%04X`, n)
	})
	if sqlRE != want {
		t.Errorf("the SQL pattern differs from Go's:\nSQL: %s\nGo:  %s", sqlRE, want)
	}
}

// TestEveryCharacter puts every character of the Basic Multilingual Plane
// (and a few beyond) into each part of a spelling, and checks that Address
// reads each as the expression PostgreSQL runs does: the fuzzer may not
// hit the ends of the ranges.
func TestEveryCharacter(t *testing.T) {
	runes := []rune{0x10000, 0x1F600, 0x10FFFF}
	for r := rune(1); r <= 0xFFFF; r++ {
		if r < 0xD800 || r > 0xDFFF {
			runes = append(runes, r)
		}
	}
	bad := 0
	for _, r := range runes {
		c := string(r)
		for _, s := range []string{"Ada" + c + " <a@b.c>", `"` + c + `" <a@b.c>`, `"\` + c + `" <a@b.c>`, c + "a@b.c", "a" + c + "@b.c", "a@b" + c + "c", "<a@b.c>" + c} {
			if got, want := Address(s), byExpression(s); got != want {
				if bad++; bad <= 10 {
					t.Errorf("Address(%q) = %q, the expression reads %q", s, got, want)
				}
			}
		}
	}
}
