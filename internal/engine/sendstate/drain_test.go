package sendstate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// insertSQL inserts an email intent as a producer in another language does:
// plain SQL, no River job.
func insertSQL(t *testing.T, pool *pgxpool.Pool, key, extra string, args ...any) {
	t.Helper()
	cols, vals := "idempotency_key, kind, payload", "$1, 'email', $2"
	if extra != "" {
		cols += ", " + extra
		vals += ", $3"
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (`+cols+`) VALUES (`+vals+`)`, append([]any{key, outboxtest.InvoiceBody}, args...)...)
}

func claimDue(t *testing.T, pool *pgxpool.Pool, n int, opts sendstate.ClaimOptions) []string {
	t.Helper()
	claimed, err := sendstate.ClaimDue(context.Background(), pool, n, opts)
	if err != nil {
		t.Fatalf("ClaimDue(%d): %v", n, err)
	}
	keys := make([]string, len(claimed))
	for i, c := range claimed {
		keys[i] = c.Record.Key
		if c.Record.State != outbox.StateSending || c.Record.Attempts < 1 || c.WindowLeft <= 0 {
			t.Fatalf("claimed %s: %+v, window %s; want sending, an attempt, a window", c.Record.Key, c.Record, c.WindowLeft)
		}
	}
	return keys
}

// The drain claims the job-less intents that are due, transactional ones
// before those of runs, each class in due order, and only once: an intent
// not due yet (send_at, or a retry's next attempt) and one of a paused run
// wait.
func TestClaimDueOrder(t *testing.T) {
	t.Parallel()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('digest'), ('paused')`)
	insertSQL(t, pool, "bulk:1", "run_key", "digest")
	insertSQL(t, pool, "later", "send_at", time.Now().Add(time.Hour))
	insertSQL(t, pool, "tx:1", "")
	insertSQL(t, pool, "held", "run_key", "paused")
	insertSQL(t, pool, "tx:2", "")
	insertSQL(t, pool, "retry", "next_attempt_at", time.Now().Add(time.Hour))
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET state = 'paused' WHERE key = 'paused'`)

	if got := claimDue(t, pool, 2, claimOpts); !equal(got, "tx:1", "tx:2") {
		t.Fatalf("first claim %v, want the transactional intents in their order", got)
	}
	if got := claimDue(t, pool, 10, claimOpts); !equal(got, "bulk:1") {
		t.Fatalf("second claim %v, want the run's member alone", got)
	}
	if got := claimDue(t, pool, 10, claimOpts); len(got) != 0 {
		t.Fatalf("third claim %v, want nothing: the rest is not due or paused", got)
	}
	if due, err := sendstate.AnyDue(context.Background(), pool, "", 0); err != nil || due {
		t.Fatalf("AnyDue = %v, %v; want false: what is left is not due, or paused", due, err)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET state = 'active' WHERE key = 'paused'`)
	if due, err := sendstate.AnyDue(context.Background(), pool, "", 0); err != nil || !due {
		t.Fatalf("AnyDue after the run's resume = %v, %v; want true", due, err)
	}
}

// The claim is fenced by the drain's lease: under a lease that has ended
// nothing is claimed (ErrLeaseLost), and RescueDrained gives what a gone
// worker left sending back to the drain, uncertain, so the next claim
// sends it again under its key.
func TestClaimDueUnderALease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	insertSQL(t, pool, "php:order:1", "")
	dead := takeLease(t, pool, "dead")
	opts := claimOpts
	opts.Owner = dead.Epoch
	if got := claimDue(t, pool, 5, opts); !equal(got, "php:order:1") {
		t.Fatalf("claim %v", got)
	}
	if n, err := sendstate.RescueDrained(ctx, pool, 0); err != nil || n != 0 {
		t.Fatalf("RescueDrained under a held lease = %d, %v; want 0", n, err)
	}
	lapse(t, pool, dead)
	if _, err := jobs.ExpireLeases(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sendstate.ClaimDue(ctx, pool, 5, opts); !errors.Is(err, sendstate.ErrLeaseLost) {
		t.Fatalf("claim under an ended lease: %v, want ErrLeaseLost", err)
	}
	if n, err := sendstate.RescueDrained(ctx, pool, 0); err != nil || n != 1 {
		t.Fatalf("RescueDrained = %d, %v; want 1", n, err)
	}
	live := takeLease(t, pool, "live")
	opts.Owner = live.Epoch
	claimed, err := sendstate.ClaimDue(ctx, pool, 5, opts)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim after the rescue: %v, %v", claimed, err)
	}
	if rec := claimed[0].Record; rec.Attempts != 2 || !rec.Uncertain || rec.JobID != nil {
		t.Fatalf("claimed again: %+v; want attempt 2, uncertain, no job", rec)
	}
	// The dead worker's answer, come late, is not recorded.
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "php:order:1", MessageID: "m", Owner: dead.Epoch}); !errors.Is(err, sendstate.ErrLeaseLost) {
		t.Fatalf("late answer: %v, want ErrLeaseLost", err)
	}
}

// A drained intent's retry lives on its row: MarkPending makes it due
// after RetryIn and keeps its 429s in a row, and a claim before then finds
// nothing.
func TestDrainedRetryIsDueLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	insertSQL(t, pool, "r:1", "")
	claimDue(t, pool, 1, claimOpts)
	err := sendstate.MarkPending(ctx, pool, sendstate.Outcome{Key: "r:1", Reason: "503", Uncertain: true, RetryIn: time.Hour, RateLimited: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimDue(t, pool, 1, claimOpts); len(got) != 0 {
		t.Fatalf("claimed %v before its retry is due", got)
	}
	if due, err := sendstate.AnyDue(ctx, pool, "", 0); err != nil || due {
		t.Fatalf("AnyDue = %v, %v; want false before the retry's time", due, err)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET next_attempt_at = now() WHERE idempotency_key = 'r:1'`)
	claimed, err := sendstate.ClaimDue(ctx, pool, 1, claimOpts)
	if err != nil || len(claimed) != 1 || claimed[0].RateLimited != 2 || claimed[0].Record.Attempts != 2 || !claimed[0].Record.Uncertain ||
		claimed[0].Tries != 2 {
		t.Fatalf("claim when due: %+v, %v; want attempt 2, try 2", claimed, err)
	}
	// A snooze gives its try back: the next claim is attempt 3 but try 2,
	// as River numbers a snoozed job's attempts.
	err = sendstate.MarkPending(ctx, pool, sendstate.Outcome{Key: "r:1", Reason: "429", RateLimited: 3, GiveBack: true})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err = sendstate.ClaimDue(ctx, pool, 1, claimOpts)
	if err != nil || len(claimed) != 1 || claimed[0].Record.Attempts != 3 || claimed[0].Tries != 2 || claimed[0].RateLimited != 3 {
		t.Fatalf("claim after a snooze: %+v, %v; want attempt 3, try 2", claimed, err)
	}
}

func equal(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// ReleaseOrphans gives back only what its owner claimed, left sending,
// claimed longer ago than the age given and not in flight: a claim whose
// answer the worker never read is replayed, uncertain, its try given back;
// a send in flight, a fresh claim, another owner's and a sent intent stay.
func TestReleaseOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := outboxtest.New(t)
	for _, k := range []string{"orphan", "flying", "fresh", "other", "sent"} {
		insertSQL(t, pool, "o:"+k, "")
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sending', claimed_by = 7, tries = 1, attempts = 1,
		updated_at = now() - interval '1 minute'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET updated_at = now() WHERE idempotency_key = 'o:fresh'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 8 WHERE idempotency_key = 'o:other'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent' WHERE idempotency_key = 'o:sent'`)
	n, err := sendstate.ReleaseOrphans(ctx, pool, 7, []string{"o:flying"}, 10*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("ReleaseOrphans = %d, %v; want 1", n, err)
	}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, uncertain, tries, coalesce(claimed_by, 0) FROM sendonce_outbox ORDER BY idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"o:flying": "sending false 1 7", "o:fresh": "sending false 1 7", "o:orphan": "pending true 0 0",
		"o:other": "sending false 1 8", "o:sent": "sent false 1 7",
	}
	for rows.Next() {
		var key, state string
		var uncertain bool
		var tries, owner int
		if err := rows.Scan(&key, &state, &uncertain, &tries, &owner); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %v %d %d", state, uncertain, tries, owner); got != want[key] {
			t.Errorf("%s: %s, want %s", key, got, want[key])
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
}

// A claim of one intent, the usual claim of a worker paced by a rate, is
// planned once per connection and then kept: with LIMIT $1 in its text the
// planner costs the generic plan for a tenth of the due rows and plans
// every claim anew (the rate-limited benchmark: 2,688 plans of 2,995
// claims, half the database's CPU per intent).
func TestClaimOfOneKeepsItsPlan(t *testing.T) {
	t.Parallel()
	pool, _, _ := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload)
		SELECT 'plan:' || g, 'email', $1 FROM generate_series(1, 3000) g`, outboxtest.InvoiceBody)
	pgtest.Exec(t, pool, `ANALYZE sendonce_outbox`)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const claims = 20
	for i := range claims {
		got, err := sendstate.ClaimDue(ctx, conn, 1, claimOpts)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim %d: %d claimed, %v; want 1", i, len(got), err)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements
		WHERE statement LIKE '%FOR UPDATE OF o SKIP LOCKED%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic < claims-5 || custom > 5 {
		t.Fatalf("%d claims of one: %d custom plans and %d generic; want at most the first 5 planned for their arguments, then the generic plan", claims, custom, generic)
	}
}

// UnclaimDrained cancels a member of a run canceled while its claim ahead
// waited only when the cancel would have canceled it unclaimed: never
// attempted before that claim. One attempted before (its outcome unknown:
// a worker killed in its send, the intent rescued and claimed ahead
// again) may have reached the API; it goes back to pending, uncertain,
// to be sent again under its key (TestSystem's rule 6, soak seeds 109 and
// 110: race members canceled, yet delivered).
func TestUnclaimDrainedOfACanceledRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := outboxtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('digest')`)
	insertSQL(t, pool, "fresh", "run_key", "digest")
	insertSQL(t, pool, "tried", "run_key", "digest")
	// tried: attempted before, its outcome unknown, rescued (pending,
	// uncertain, its attempt counted).
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET attempts = 1, uncertain = true, first_attempt_at = now() - interval '1 second'
		WHERE idempotency_key = 'tried'`)
	if got := claimDue(t, pool, 2, claimOpts); len(got) != 2 {
		t.Fatalf("claim %v, want both", got)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 7`)
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET state = 'canceled' WHERE key = 'digest'`)
	if n, err := sendstate.UnclaimDrained(ctx, pool, []string{"fresh", "tried"}, 7); err != nil || n != 2 {
		t.Fatalf("UnclaimDrained = %d, %v; want 2", n, err)
	}
	want := map[string]string{"fresh": "canceled 0 true false", "tried": "pending 1 false true"}
	for key, w := range want {
		var state string
		var attempts int
		var noFirst, uncertain bool
		if err := pool.QueryRow(ctx, `SELECT state, attempts, first_attempt_at IS NULL, uncertain FROM sendonce_outbox WHERE idempotency_key = $1`,
			key).Scan(&state, &attempts, &noFirst, &uncertain); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %d %v %v", state, attempts, noFirst, uncertain); got != w {
			t.Errorf("%s: %s, want %s (state attempts no-first-attempt uncertain)", key, got, w)
		}
	}
}

// UnclaimDrained gives a claim that was never attempted back as it was:
// pending, its attempt and try not counted, no first attempt, not
// uncertain; the next claim takes it again, first in due order. A claim of
// another owner and a sent intent stay as they are.
func TestUnclaimDrained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := outboxtest.New(t)
	for _, k := range []string{"u:1", "u:2", "u:3"} {
		insertSQL(t, pool, k, "")
	}
	opts := claimOpts
	if got := claimDue(t, pool, 3, opts); !equal(got, "u:1", "u:2", "u:3") {
		t.Fatalf("claim %v, want all three", got)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 7`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 8 WHERE idempotency_key = 'u:2'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', message_id = 'm' WHERE idempotency_key = 'u:3'`)
	n, err := sendstate.UnclaimDrained(ctx, pool, []string{"u:1", "u:2", "u:3"}, 7)
	if err != nil || n != 1 {
		t.Fatalf("UnclaimDrained = %d, %v; want 1", n, err)
	}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, uncertain, attempts, tries, first_attempt_at IS NULL,
		coalesce(claimed_by, 0) FROM sendonce_outbox ORDER BY idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"u:1": "pending false 0 0 true 0", "u:2": "sending false 1 1 false 8", "u:3": "sent false 1 1 false 7",
	}
	for rows.Next() {
		var key, state string
		var uncertain, noFirst bool
		var attempts, tries, owner int
		if err := rows.Scan(&key, &state, &uncertain, &attempts, &tries, &noFirst, &owner); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %v %d %d %v %d", state, uncertain, attempts, tries, noFirst, owner); got != want[key] {
			t.Errorf("%s: %s, want %s (state uncertain attempts tries no-first-attempt owner)", key, got, want[key])
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if got := claimDue(t, pool, 3, opts); !equal(got, "u:1") {
		t.Fatalf("claim after the unclaim %v, want u:1 again", got)
	}
}

// A give-back racing its run's cancel leaves the member canceled, not
// pending for the next claim to send: the cancel has locked the run and
// canceled the members that were pending (not this one, claimed) when the
// give-back comes; the give-back waits for the run's lock, and then reads
// the run canceled (TestSystem, rule 3, seed 1632: without the wait it
// read the run as it was before the cancel, and the member went out after
// its run's cancel).
func TestUnclaimDrainedRacingItsRunsCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := outboxtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('digest')`)
	insertSQL(t, pool, "ahead", "run_key", "digest")
	if got := claimDue(t, pool, 1, claimOpts); len(got) != 1 {
		t.Fatalf("claim %v, want 1", got)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 7`)
	cancel, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel.Rollback(ctx)
	for _, sql := range []string{`SELECT state FROM sendonce_run WHERE key = 'digest' FOR UPDATE`,
		`UPDATE sendonce_run SET state = 'canceled' WHERE key = 'digest'`,
		`UPDATE sendonce_outbox SET state = 'canceled' WHERE run_key = 'digest' AND state = 'pending' AND attempts = 0`} {
		if _, err := cancel.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := sendstate.UnclaimDrained(ctx, pool, []string{"ahead"}, 7)
		done <- err
	}()
	// The give-back waits for the run's lock, or has given the member
	// back already (the old statement): either is seen in the database.
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%runs AS MATERIALIZED%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM sendonce_outbox WHERE idempotency_key = 'ahead'`).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 || state != "sending" {
			break
		}
		time.Sleep(5 * time.Millisecond) // the wait has no event to await from here
	}
	if err := cancel.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM sendonce_outbox WHERE idempotency_key = 'ahead'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "canceled" {
		t.Fatalf("the member given back while its run was being canceled is %s, want canceled", state)
	}
}
