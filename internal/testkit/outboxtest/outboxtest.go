// Package outboxtest holds what tests of the outbox and of the machinery
// behind it share: an outbox over a fresh database, reading an intent, and
// one-value queries.
package outboxtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/base/sendjob"
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

// GiveJobs gives each of the intents under keys (pending, never attempted,
// with no River job) a River job of its own, as releases before the drain
// did at enqueue (issue 44): sendjob.Args naming the key, kind and run, on
// the row's queue, held until its send_at, at its run's priority. A
// database upgraded from such a release holds intents like these, and the
// machinery that works their jobs is tested with them. It fails the test
// unless every key was given a job.
func GiveJobs(t testing.TB, pool *pgxpool.Pool, keys ...string) {
	t.Helper()
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return GiveJobsTx(ctx, tx, rc, keys) })
	if err != nil {
		t.Fatalf("outboxtest: give jobs: %v", err)
	}
}

// GiveJobsTx is GiveJobs in tx, with rc's inserts: the intents under keys
// (pending, never attempted, with no River job) get River jobs of their
// own when tx commits. It fails unless every key was given one.
func GiveJobsTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], keys []string) error {
	n, err := sendjob.Give(ctx, tx, rc, `SELECT id, idempotency_key, kind, coalesce(run_key, ''), send_at, queue
		FROM sendonce_outbox WHERE idempotency_key = ANY($1) AND state = 'pending' AND job_id IS NULL AND attempts = 0
		ORDER BY id FOR UPDATE`, []any{keys},
		func(rows pgx.Rows) (int64, river.InsertManyParams, error) {
			var id int64
			var key, kind, run, queue string
			var sendAt *time.Time
			err := rows.Scan(&id, &key, &kind, &run, &sendAt, &queue)
			var at time.Time
			if sendAt != nil {
				at = *sendAt
			}
			return id, river.InsertManyParams{Args: sendjob.Args{Key: key, IntentKind: kind, RunKey: run},
				InsertOpts: sendjob.InsertOpts(queue, at, sendjob.PriorityFor(run))}, err
		}, `UPDATE sendonce_outbox o SET job_id = u.job_id FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id) WHERE o.id = u.id`)
	if err == nil && n != len(keys) {
		err = fmt.Errorf("%d of %d intents were given a job (want each pending, never attempted, with no job)", n, len(keys))
	}
	return err
}
