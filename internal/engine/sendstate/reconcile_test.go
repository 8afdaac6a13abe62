package sendstate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Reconcile reads the unsettled intents in pieces (ReconcileWindow at a
// time, each state in id order) and still finds every stranded one, in
// both states, wherever it falls among the windows. The intents have jobs
// of their own, as in a database upgraded from a release before the drain.
func TestReconcileInPieces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setupJobs(t, numbered("w", 0, 10)...)
	jobs.ReconcileWindow = 3
	for _, k := range []string{"w:1", "w:2", "w:5"} {
		pgtest.Exec(t, pool, `DELETE FROM river_job WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = $1)`, k)
	}
	claim(t, pool, "w:9")
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = 'w:9')`)
	if n, err := jobs.Reconcile(ctx); err != nil || n != 4 {
		t.Fatalf("Reconcile with a window of 3 = %d, %v; want the 4 stranded intents", n, err)
	}
	if rec := get(t, pool, "w:9"); rec.State != outbox.StateSending || jobState(t, pool, *rec.JobID) != "available" {
		t.Errorf("w:9: %+v, want sending with a new available job", rec)
	}
	if n, err := jobs.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("second Reconcile = %d, %v; want 0", n, err)
	}
}

// Issue 24, item 4: under a DBA's statement_timeout, Reconcile still
// completes however large the backlog, since none of its statements reads
// more than a window of it, and a window that passes the timeout is read
// again in smaller ones. Scaled down so the test stays small: 600,000
// unsettled intents and a 200 ms timeout, where the whole backlog read in
// one statement took about twice that; a window's statement takes a few
// milliseconds.
func TestReconcileUnderStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backlog = 600_000
	pool, _, jobs := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'sendonce_send', 25, $2, 'scheduled', now() + interval '1 day' FROM generate_series(1, $1)`, backlog, outbox.DefaultQueue)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, job_id)
		SELECT 'big:' || j.id, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}', j.id FROM river_job j`)
	// The last one's job is gone.
	pgtest.Exec(t, pool, `DELETE FROM river_job WHERE id = (SELECT max(job_id) FROM sendonce_outbox)`)
	pgtest.Exec(t, pool, `ANALYZE sendonce_outbox, river_job`) // as autovacuum would have

	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "200ms"
	limited, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	dba := &sendstate.Scheduler{Pool: limited, River: jobs.River, Queue: jobs.Queue, ReconcileBudget: 2 * backlog}
	if n, err := dba.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile of %d unsettled intents under a 200 ms statement_timeout = %d, %v; want the 1 stranded", backlog, n, err)
	}

	// A window whose statement passes the timeout (here the whole backlog,
	// as on a loaded server a default window can): Reconcile reads the
	// same intents again in smaller windows instead of failing.
	pgtest.Exec(t, pool, `DELETE FROM river_job WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = (SELECT max(idempotency_key) FROM sendonce_outbox))`)
	whole := &sendstate.Scheduler{Pool: limited, River: jobs.River, Queue: jobs.Queue, ReconcileWindow: backlog, ReconcileBudget: 2 * backlog}
	if n, err := whole.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile with a window of %d under a 200 ms statement_timeout = %d, %v; want the 1 stranded", backlog, n, err)
	}
}

// Issue 26: one call of Reconcile reads at most ReconcileBudget unsettled
// intents, and the next goes on where it stopped: an intent stranded at the
// end of a backlog larger than the budget is found by a later call, and
// every pass ends. The intents have jobs of their own, as in a database
// upgraded from a release before the drain.
func TestReconcileBudgetPerCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setupJobs(t, numbered("b", 0, 10)...)
	jobs.ReconcileWindow, jobs.ReconcileBudget = 2, 4
	pgtest.Exec(t, pool, `DELETE FROM river_job WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = 'b:9')`)
	var got []int
	for range 4 {
		n, err := jobs.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	// 10 pending: calls read 1-4, 5-8, 9-10 (the pass ends), then 1-4.
	if fmt.Sprint(got) != "[0 0 1 0]" {
		t.Fatalf("Reconcile with a budget of 4 over 10 pending intents found %v per call, want [0 0 1 0]", got)
	}
}
