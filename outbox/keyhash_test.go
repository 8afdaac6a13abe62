package outbox_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestKeyHashIsTheDatabases checks that the hash EnqueueMany computes to
// look a key up among the tombstones is the one the database stores them
// under (sendonce_key_hash): were they to differ, a pruned key would be
// enqueued again as new.
func TestKeyHashIsTheDatabases(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	for _, key := range []string{"a", "invoice:inv_4192", "run.2026-12:member_7-b", strings.Repeat("k", 255)} {
		var want []byte
		if err := pool.QueryRow(context.Background(), `SELECT sendonce_key_hash($1)`, key).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := outbox.KeyHash(key); !bytes.Equal(got, want) {
			t.Errorf("KeyHash(%q) = %x, the database's sendonce_key_hash = %x", key, got, want)
		}
	}
}
