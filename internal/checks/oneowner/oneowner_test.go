package oneowner_test

import (
	"testing"

	"github.com/sendonce/sendonce/internal/checks/oneowner"
)

// TestOneOwner: no production Go file outside internal/base/store holds
// SQL on a sendonce_* or river_* table (issue 44: one owner of the
// intent's row).
func TestOneOwner(t *testing.T) {
	found, err := oneowner.Find("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: SQL outside internal/base/store: %s", f.Pos, f.Text)
	}
}

// TestFindsSQL: the check sees a statement in a literal, and not a job
// kind or a channel name alone.
func TestFindsSQL(t *testing.T) {
	found, err := oneowner.Find("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Fatalf("found %d literals, want 2 (the SELECT and the pg_notify): %v", len(found), found)
	}
}
