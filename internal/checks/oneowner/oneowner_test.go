package oneowner_test

import (
	"testing"

	"github.com/sendonce/sendonce/internal/checks/oneowner"
)

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
