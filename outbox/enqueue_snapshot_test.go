package outbox_test

// Enqueueing a key in a REPEATABLE READ or SERIALIZABLE transaction whose
// snapshot does not show what happened to the key since (issue 22, hole 1):
// a prune that committed after the snapshot deleted the key's row and left
// a tombstone the snapshot cannot see. The enqueue must never keep a second
// row: it fails with a serialization failure the caller retries, and the
// retry, in a new snapshot, answers from the tombstone.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// otherInvoiceBody is another intent than outboxtest.InvoiceBody.
const otherInvoiceBody = `{"from":"billing@example.com","to":["ada@example.com"],"subject":"Invoice inv_4193","text":"Attached."}`

// settleSent marks the key's intent sent an hour ago, as a worker's drain
// leaves it, so that a prune may take it.
func settleSent(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', updated_at = now() - interval '1 hour',
		created_at = now() - interval '1 hour' WHERE idempotency_key = $1`, key)
}

// pruneAll prunes every settled intent (sendonce prune --retain 0) and
// checks that key left a tombstone.
func pruneAll(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	if _, err := sendstate.Prune(context.Background(), pool, sendstate.PruneOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash($1)`, key); n != 1 {
		t.Fatalf("prune left no tombstone of %q", key)
	}
}

// awaitLockWaits waits until n sessions of the test's database wait for a
// lock.
func awaitLockWaits(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for outboxtest.Value[int](t, pool, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d sessions wait for a lock", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// snapshotPath is one way to enqueue a key again in the producer's
// transaction: it returns what the enqueue answered, for the test's
// messages.
type snapshotPath struct {
	name    string
	enqueue func(ctx context.Context, ob *outbox.Outbox, tx pgx.Tx, key, body string) (string, error)
}

var snapshotPaths = []snapshotPath{
	{"Enqueue", func(ctx context.Context, ob *outbox.Outbox, tx pgx.Tx, key, body string) (string, error) {
		res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: body})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Existing %v, pruned %v, id %d", res.Existing, res.Record.PrunedAt != nil, res.Record.ID), nil
	}},
	{"EnqueueMany", func(ctx context.Context, ob *outbox.Outbox, tx pgx.Tx, key, body string) (string, error) {
		// A new key beside it: it must not stay written either.
		res, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{{Key: key + ".new", Payload: outboxtest.InvoiceBody}, {Key: key, Payload: body}})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("[1] Existing %v, pruned %v, id %d", res[1].Existing, res[1].Record.PrunedAt != nil, res[1].Record.ID), nil
	}},
	{"SQL", func(ctx context.Context, _ *outbox.Outbox, tx pgx.Tx, key, body string) (string, error) {
		tag, err := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ($1, 'email', $2)
			ON CONFLICT (idempotency_key) DO NOTHING`, key, body)
		return tag.String(), err
	}},
}

// TestEnqueueInSnapshotOlderThanAPrune: in a REPEATABLE READ or
// SERIALIZABLE transaction, enqueueing a key again (Enqueue, EnqueueMany,
// a plain INSERT; the same intent or another) after a prune of the key
// committed that the transaction's snapshot does not show fails with a
// serialization failure (SQLSTATE 40001) and leaves nothing written; the
// retry answers from the tombstone, as under READ COMMITTED. The snapshot
// may be older than the prune, older than the intent itself, or the prune
// may commit while the enqueue waits for it on the key. An intent that is
// still there but enqueued or sent after the snapshot was taken fails the
// same way (PostgreSQL's own refusal of ON CONFLICT against a row the
// snapshot cannot see), with the same error.
func TestEnqueueInSnapshotOlderThanAPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	original := func(key string) {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: key, Payload: outboxtest.InvoiceBody}); err != nil {
			t.Fatal(err)
		}
	}
	type scenario struct {
		name string
		// before runs before the producer's transaction takes its
		// snapshot; after runs after it, before the enqueue; during, if
		// set, holds a transaction the enqueue waits for, which the test
		// commits once the enqueue waits.
		before, after func(key string)
		during        func(key string) pgx.Tx
		pruned        bool // the key is pruned by the end (else it is live)
	}
	scenarios := []scenario{
		{name: "prune-after-snapshot", pruned: true,
			before: func(key string) { original(key); settleSent(t, pool, key) },
			after:  func(key string) { pruneAll(t, pool, key) }},
		{name: "intent-after-snapshot", pruned: true,
			before: func(string) {},
			after:  func(key string) { original(key); settleSent(t, pool, key); pruneAll(t, pool, key) }},
		{name: "prune-during-enqueue", pruned: true,
			before: func(key string) { original(key); settleSent(t, pool, key) },
			after:  func(string) {},
			during: func(key string) pgx.Tx { return outboxtest.PruneOpen(t, pool, key) }},
		// Not pruned: the intent committed after the snapshot and is
		// still there. PostgreSQL refuses the conflict with a row the
		// snapshot cannot see itself.
		{name: "live-after-snapshot",
			before: func(string) {},
			after:  func(key string) { original(key) }},
		// Nor pruned: the intent was there, and was sent after the
		// snapshot was taken.
		{name: "sent-after-snapshot",
			before: func(key string) { original(key) },
			after:  func(key string) { settleSent(t, pool, key) }},
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, sc := range scenarios {
			for _, p := range snapshotPaths {
				for _, body := range []string{"same", "other"} {
					name := fmt.Sprintf("%s/%s/%s/%s", strings.ReplaceAll(string(iso), " ", "-"), sc.name, p.name, body)
					key := strings.ReplaceAll(strings.ReplaceAll(name, "/", ":"), " ", "-")
					payload := outboxtest.InvoiceBody
					if body == "other" {
						payload = otherInvoiceBody
					}
					sc.before(key)
					tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
					if err != nil {
						t.Fatal(err)
					}
					// The snapshot: the transaction's first statement.
					if _, err := tx.Exec(ctx, `SELECT count(*) FROM sendonce_outbox`); err != nil {
						t.Fatal(err)
					}
					sc.after(key)
					var answer string
					if sc.during == nil {
						answer, err = p.enqueue(ctx, ob, tx, key, payload)
					} else {
						blocker := sc.during(key)
						done := make(chan error, 1)
						go func() {
							var err error
							answer, err = p.enqueue(ctx, ob, tx, key, payload)
							done <- err
						}()
						awaitLockWaits(t, pool, 1)
						if err := blocker.Commit(ctx); err != nil {
							t.Fatal(err)
						}
						err = <-done
					}
					var pgErr *pgconn.PgError
					switch {
					case err == nil:
						t.Errorf("%s: answered %s, err <nil>; want a serialization failure (SQLSTATE 40001)", name, answer)
						// As the application would: it commits.
						if err := tx.Commit(ctx); err != nil {
							t.Errorf("%s: commit: %v", name, err)
						}
					case !errors.As(err, &pgErr) || pgErr.Code != "40001":
						t.Errorf("%s: %v; want a serialization failure (SQLSTATE 40001)", name, err)
					case p.name != "SQL" && (!strings.HasPrefix(err.Error(), "outbox: ") || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "retry")):
						t.Errorf("%s: %v; want an outbox error naming the key and saying to retry", name, err)
					case p.name == "SQL" && sc.pruned && !strings.Contains(pgErr.Message+pgErr.Where, "retry the transaction"):
						t.Errorf("%s: %v (%s); want it to say to retry the transaction", name, err, pgErr.Where)
					}
					_ = tx.Rollback(ctx)

					// Nothing of the enqueue is left: no second row (and, as
					// no enqueue writes one, no River job).
					rows := 0
					if !sc.pruned {
						rows = 1
					}
					if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key IN ($1, $1 || '.new')`, key); n != rows {
						t.Errorf("%s: %d rows under the key, want %d", name, n, rows)
					}
					if n := riverJobs(t, pool); n != 0 {
						t.Errorf("%s: %d River jobs, want none", name, n)
					}

					// The retry, in a new snapshot, answers as ever: the same
					// intent is the stored one, another is a key reuse.
					tx, err = pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
					if err != nil {
						t.Fatal(err)
					}
					answer, err = p.enqueue(ctx, ob, tx, key, payload)
					switch {
					case body == "other" && p.name == "SQL" && sc.pruned:
						if err == nil || !strings.Contains(err.Error(), "is already used") {
							t.Errorf("%s: retry: %s, %v; want a key-reuse error", name, answer, err)
						}
					case body == "other" && p.name != "SQL":
						if !errors.Is(err, outbox.ErrKeyReuse) {
							t.Errorf("%s: retry: %s, %v; want ErrKeyReuse", name, answer, err)
						}
					case p.name == "SQL":
						if err != nil || answer != "INSERT 0 0" {
							t.Errorf("%s: retry: %s, %v; want INSERT 0 0", name, answer, err)
						}
					default:
						want := fmt.Sprintf("Existing true, pruned %v", sc.pruned)
						if err != nil || !strings.Contains(answer, want) {
							t.Errorf("%s: retry: %s, %v; want %s", name, answer, err, want)
						}
					}
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						err = tx.Rollback(ctx)
					}
					if err != nil {
						t.Fatal(err)
					}
					// The retry left the new key of EnqueueMany only.
					if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = $1`, key); n != rows {
						t.Errorf("%s: %d rows under the key after the retry, want %d", name, n, rows)
					}
				}
			}
		}
	}
}

// TestEnqueueInSnapshotNewKey: in REPEATABLE READ and SERIALIZABLE
// transactions new keys go in as ever, by every path, and the check of the
// tombstones outside the snapshot leaves none behind.
func TestEnqueueInSnapshotNewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, p := range snapshotPaths {
			key := strings.ReplaceAll(string(iso), " ", "-") + ":new:" + p.name
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				answer, err := p.enqueue(ctx, ob, tx, key, outboxtest.InvoiceBody)
				if err == nil && strings.Contains(answer, "Existing true") {
					t.Errorf("%s: %s; want a new intent", key, answer)
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = $1`, key); n != 1 {
				t.Errorf("%s: %d rows, want 1", key, n)
			}
		}
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_tombstone`); n != 0 {
		t.Fatalf("%d tombstones left by enqueues of new keys, want 0", n)
	}
}
