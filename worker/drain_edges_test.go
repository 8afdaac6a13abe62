package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// settled waits until n outcomes that end an intent (sent, replayed,
// failed, expired) have been observed.
func (r *results) settled(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		r.mu.Lock()
		got := r.n[worker.ResultSent] + r.n[worker.ResultReplayed] + r.n[worker.ResultFailed] + r.n[worker.ResultExpired]
		ch := r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %d settled outcomes: %d", n, got)
		}
	}
}

// SendConfig.MaxAttempts: "Snoozes do not count." A drained intent (plain
// SQL, no River job) the API rate-limits a few times (429, Retry-After)
// and then answers one 503 must be retried and delivered, as the same
// intent sent by a River job is: the 429 snoozes are not attempts.
func TestDrainedSnoozesDoNotCountAsAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, pool, ob, _, _ := e2eSetup(t)
	fake, c := faultyAPI(t,
		"retry_after=0.1:times=6:to=sql@", "error_before=503:times=1:to=sql@",
		"retry_after=0.1:times=6:to=riv@", "error_before=503:times=1:to=riv@")
	insertSQL(t, pool, "sql:limited", "sql@example.com")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "go:limited",
			Payload: json.RawMessage(`{"from":"billing@example.com","to":["riv@example.com"],"subject":"Invoice","text":"x"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, Send: worker.SendConfig{
		MaxAttempts: 3, RetryBase: 50 * time.Millisecond, RateLimitWait: 200 * time.Millisecond, Observer: seen}})
	seen.settled(t, ctx, 2)
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, attempts, snoozes, coalesce(last_error, ''), job_id IS NULL FROM sendonce_outbox ORDER BY idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, state, lastErr string
		var attempts, snoozes int
		var drained bool
		if err := rows.Scan(&key, &state, &attempts, &snoozes, &lastErr, &drained); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s, attempts %d, snoozes %d, drained %v, last error %q", key, state, attempts, snoozes, drained, lastErr)
		if state != "sent" {
			t.Errorf("%s (drained %v) is %s, want sent: 429 snoozes counted against MaxAttempts 3 (%s)", key, drained, state, lastErr)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Deliveries()); n != outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) {
		t.Errorf("%d deliveries for the sent rows", n)
	}
}

// docs/runs-and-schedules.md, "Fair sharing": a run's members "wait for the
// send budget behind" lone intents: "a password reset enqueued behind a
// 100,000-email campaign ... takes one of the next tokens (behind at most
// 20 ms of the campaign's sends)". A run whose members a SQL producer
// inserted (a schedule's --sql-file, say) is drained; its members must
// yield the budget to a lone intent as a Go-enqueued run's do. At 10/s, a
// reset enqueued while the campaign drains must go out within a few
// tokens.
func TestDrainedRunYieldsBudget(t *testing.T) {
	for _, producer := range []string{"go", "sql"} {
		t.Run(producer, func(t *testing.T) {
			ctx, pool, ob, fake, c := e2eSetup(t)
			const members = 300
			body := func(to string) json.RawMessage {
				return json.RawMessage(fmt.Sprintf(`{"from":"news@example.com","to":[%q],"subject":"News","text":"x"}`, to))
			}
			if producer == "go" {
				run := outbox.Run{Key: "campaign"}
				for i := range members {
					run.Intents = append(run.Intents, outbox.Intent{Key: fmt.Sprintf("campaign:%d", i), Payload: body(fmt.Sprintf("m%d@example.com", i))})
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.EnqueueRun(ctx, tx, run); return err }); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := pool.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('campaign')`); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
					SELECT 'campaign:' || i, 'email', jsonb_build_object('from', 'news@example.com', 'to', jsonb_build_array('m' || i || '@example.com'),
						'subject', 'News', 'text', 'x'), 'campaign' FROM generate_series(0, $1 - 1) i`, members); err != nil {
					t.Fatal(err)
				}
			}
			limits, err := worker.ParseRateLimits("10/s")
			if err != nil {
				t.Fatal(err)
			}
			start(t, pool, &worker.Config{Client: c, Concurrency: 10, RateLimits: limits})
			if err := fake.WaitDeliveries(ctx, 15); err != nil {
				t.Fatal(err)
			}
			// Eight resets, one after another: the budget serves its waiters
			// in no fixed order, so one reset may be lucky; eight rarely all are.
			var total time.Duration
			for k := range 8 {
				key := fmt.Sprintf("reset:%d", k)
				enqueued := time.Now()
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: body(fmt.Sprintf("reset%d@example.com", k))})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				var took time.Duration
				for took == 0 {
					for _, d := range fake.Deliveries() {
						if d.IdempotencyKey == key {
							took = d.DeliveredAt.Sub(enqueued)
						}
					}
					if took == 0 {
						select {
						case <-ctx.Done():
							t.Fatalf("%s was never delivered", key)
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
				t.Logf("%s campaign: %s went out %s after its enqueue", producer, key, took.Round(time.Millisecond))
				total += took
			}
			if mean := total / 8; mean > 400*time.Millisecond {
				t.Errorf("%s campaign: a reset waited %s on average behind the campaign at 10/s: the run's members did not yield the budget", producer, mean.Round(time.Millisecond))
			}
		})
	}
}

// A worker stopped with a short context while drained sends are in flight
// (delivered, their answers held back): nothing is left sending, nothing
// lost, and the next worker sends every intent once (the cut-off ones as
// replays).
func TestDrainedStopMidSend(t *testing.T) {
	t.Parallel()
	ctx, pool, _, _, _ := e2eSetup(t)
	fake, c := faultyAPI(t, "latency_after=2s:method=POST:times=1")
	const n = 30
	for i := range n {
		insertSQL(t, pool, fmt.Sprintf("sql:stop:%d", i), fmt.Sprintf("s%d@example.com", i))
	}
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, 8); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	began := time.Now()
	_ = w.Stop(sctx)
	cancel()
	stopTook := time.Since(began)
	if s := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sending'`); s != 0 {
		t.Errorf("%d rows left sending after Stop", s)
	}
	cut := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'pending' AND uncertain`)
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 8, Send: worker.SendConfig{Observer: seen}})
	seen.settled(t, ctx, n-outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`))
	perKey := map[string]int{}
	for _, d := range fake.Deliveries() {
		perKey[d.IdempotencyKey]++
	}
	for k, c := range perKey {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
	if len(perKey) != n {
		t.Errorf("%d keys delivered, want %d", len(perKey), n)
	}
	if s := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state <> 'sent'`); s != 0 {
		t.Errorf("%d rows not sent", s)
	}
	t.Logf("stop took %s; %d cut off; replayed %d; deliveries %d", stopTook.Round(time.Millisecond), cut,
		outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE replayed`), len(fake.Deliveries()))
}

// A run whose members a SQL producer inserted, paused, resumed, rescheduled
// an hour ahead and canceled while the drain sends it: once the sends in
// flight at each step have ended, nothing more of it goes out while it is
// paused, rescheduled or canceled; resumed, it goes on; no member twice.
func TestDrainedRunPauseRescheduleCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	const members = 300
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('camp')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
		SELECT 'camp:' || i, 'email', jsonb_build_object('from', 'news@example.com', 'to', jsonb_build_array('m' || i || '@example.com'),
			'subject', 'News', 'text', 'x'), 'camp' FROM generate_series(0, $1 - 1) i`, members); err != nil {
		t.Fatal(err)
	}
	limits, err := worker.ParseRateLimits("20/s")
	if err != nil {
		t.Fatal(err)
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 6, RateLimits: limits})
	// settle waits for the run's sends in flight to end, then 3 sweep
	// intervals, and returns the deliveries before and after those.
	settle := func(what string) {
		t.Helper()
		for outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sending'`) > 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: rows still sending", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
		before := len(fake.Deliveries())
		time.Sleep(3 * time.Second) // nothing to await: an absence, over three sweeps
		if after := len(fake.Deliveries()); after != before {
			t.Errorf("%s: %d deliveries after the sends in flight ended (%d, then %d)", what, after-before, before, after)
		}
		t.Logf("%s: %d delivered", what, before)
	}
	if err := fake.WaitDeliveries(ctx, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.PauseRun(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	settle("paused")
	if _, err := ob.ResumeRun(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, len(fake.Deliveries())+20); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.RescheduleRun(ctx, "camp", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	settle("rescheduled")
	if _, err := ob.RescheduleRun(ctx, "camp", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, len(fake.Deliveries())+20); err != nil {
		t.Fatal(err)
	}
	res, err := ob.CancelRun(ctx, "camp")
	if err != nil {
		t.Fatal(err)
	}
	settle("canceled")
	perKey := map[string]int{}
	for _, d := range fake.Deliveries() {
		perKey[d.IdempotencyKey]++
	}
	for k, n := range perKey {
		if n != 1 {
			t.Errorf("%s delivered %d times", k, n)
		}
	}
	sent := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`)
	canceled := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'canceled'`)
	if sent != len(perKey) || sent+canceled != members {
		t.Errorf("%d sent, %d canceled, %d delivered keys, of %d members", sent, canceled, len(perKey), members)
	}
	t.Logf("canceled %d (left %d); %d sent", res.Canceled, res.Left, sent)
}

// Issue 7 of the brief: does an idle drain hold the fleet's quota? With a
// quota of 1 a day and nothing sent yet, worker A (whose River client works
// another queue) only drains, idle; worker B works the queue a Go intent
// goes to. The intent must go out promptly: no real send used the quota.
func TestIdleDrainHoldsNoQuota(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	limits, err := worker.ParseRateLimits("1/d")
	if err != nil {
		t.Fatal(err)
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, RateLimits: limits, Queue: "elsewhere", SweepInterval: 100 * time.Millisecond})
	// A's drain looks at its start and at every sweep (each 100 ms); its
	// lease, renewed every second, says when it has been idle for more
	// than a second and a half.
	for outboxtest.Value[bool](t, pool, `SELECT coalesce(bool_or(renewed_at - started_at > interval '1.5 seconds'), false) FROM sendonce_worker`) == false {
		select {
		case <-ctx.Done():
			t.Fatal("worker A's lease was never renewed")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if used := outboxtest.Value[int](t, pool, `SELECT coalesce(sum(used), 0)::int FROM sendonce_rate_quota`); used != 0 {
		t.Fatalf("an idle drain counted %d of the quota as used, want none", used)
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, RateLimits: limits})
	enqueued := time.Now()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "go:one",
			Payload: json.RawMessage(`{"from":"billing@example.com","to":["one@example.com"],"subject":"Invoice","text":"x"}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := fake.WaitDeliveries(wctx, 1); err != nil {
		t.Fatalf("the only intent of the day, enqueued %s ago, is not delivered: %v (state %s, last error %q)",
			time.Since(enqueued).Round(time.Second), err,
			outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_outbox`),
			outboxtest.Value[string](t, pool, `SELECT coalesce(last_error, '') FROM sendonce_outbox`))
	}
	t.Logf("delivered %s after its enqueue", time.Since(enqueued).Round(time.Millisecond))
	if used := outboxtest.Value[int](t, pool, `SELECT coalesce(max(used), 0)::int FROM sendonce_rate_quota`); used != 1 {
		t.Errorf("the quota counts %d used, want 1: the one send", used)
	}
}
