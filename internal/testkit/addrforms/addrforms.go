// Package addrforms loads the table of address forms that the Go and SQL
// tests of the address rule share (internal/base/suppress/testdata/forms.json):
// each form, its normal form, and whether the API's parser takes it.
package addrforms

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Case is one row of the table.
type Case struct {
	Form   string `json:"form"`
	Normal string `json:"normal"` // "": refused
	API    bool   `json:"api"`    // net/mail accepts it
	Why    string `json:"why"`
	Note   string `json:"note"`
}

// Load reads the table's rows that name a form (a row without one only
// comments on the table), failing the test if the file does not read.
func Load(t testing.TB) []Case {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("addrforms: no source path to find forms.json from")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "base", "suppress", "testdata", "forms.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all []Case
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var out []Case
	for _, c := range all {
		if c.Form != "" {
			out = append(out, c)
		}
	}
	return out
}
