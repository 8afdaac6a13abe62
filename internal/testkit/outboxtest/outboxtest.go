// Package outboxtest holds what tests of the outbox and of the machinery
// behind it share: an outbox over a fresh database, reading an intent, and
// one-value queries.
package outboxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// InvoiceBody is a valid email payload.
const InvoiceBody = `{"from":"billing@example.com","to":["ada@example.com"],"subject":"Invoice inv_4192","text":"Attached."}`

// New returns a fresh, migrated database (dropped when the test ends) and
// an Outbox over it.
func New(t testing.TB) (*pgxpool.Pool, *outbox.Outbox) {
	t.Helper()
	pool := pgtest.NewDB(t)
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, ob
}

// Get returns the intent with key, failing the test when there is none.
func Get(t testing.TB, ob *outbox.Outbox, key string) *outbox.Record {
	t.Helper()
	rec, err := ob.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Value runs a query that returns one value.
func Value[T any](t testing.TB, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("outboxtest: %s: %v", sql, err)
	}
	return v
}

// PruneOpen deletes key's row and writes its tombstone as a prune does
// (sendstate.Prune), in a transaction left open for the test to race
// against and to end.
func PruneOpen(t testing.TB, pool *pgxpool.Pool, key string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `WITH d AS (DELETE FROM sendonce_outbox WHERE idempotency_key = $1 RETURNING *)
		INSERT INTO sendonce_tombstone (key_hash, intent_hash, state)
		SELECT sendonce_key_hash(idempotency_key), sendonce_intent_hash(kind, template_id, payload), state FROM d`, key)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}
