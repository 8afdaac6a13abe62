package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// A lone mark of sent intents commits without waiting for the WAL flush,
// so a database crash can lose one the database had acknowledged: the
// intent is left sending under the worker's claim, and nothing of the
// worker's has it in flight. The crash also ends the sweeper's LISTEN
// connection; from then on the sweeper looks for such orphans at every
// sweep, and the intent goes out again under its key within seconds, not
// at the net every rescueNetEvery sweeps (here 15 s).
func TestOrphanLookAfterLostConnection(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	start(t, pool, &worker.Config{Client: c, SweepInterval: 250 * time.Millisecond})

	// The sweeper's first sweep (which looks for orphans too) is done
	// once its LISTEN is in place.
	var listener int32
	for listener == 0 {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN sendonce_outbox'`).Scan(&listener)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the sweeper never listened")
		}
	}
	epoch := outboxtest.Value[int32](t, pool, `SELECT epoch FROM sendonce_worker WHERE ended_at IS NULL`)

	// The lost mark: an intent sending under the worker's claim, claimed
	// 30 s ago, which the worker does not have in flight.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "orphan:1", Payload: json.RawMessage(outboxtest.InvoiceBody)}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sending', attempts = 1, claimed_by = $1, tries = 1,
			first_attempt_at = now() - interval '30 seconds', updated_at = now() - interval '30 seconds'
			WHERE idempotency_key = 'orphan:1'`, epoch)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	lost := time.Now()
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, listener); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := fake.WaitDeliveries(wait, 1); err != nil {
		t.Fatalf("the orphan was not sent again within 5 s of the lost connection: %v", err)
	}
	if d := fake.Deliveries(); len(d) != 1 || d[0].IdempotencyKey != "orphan:1" {
		t.Fatalf("deliveries %+v, want orphan:1 once", d)
	}
	t.Logf("sent again %s after the lost connection", time.Since(lost).Round(time.Millisecond))
}
