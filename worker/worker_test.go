package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// e2eSetup gives an end-to-end test a minute, a fresh database with an
// outbox, a fake API and a client of it.
func e2eSetup(t *testing.T) (context.Context, *pgxpool.Pool, *outbox.Outbox, *fakeapi.Server, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{})
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pool, ob, fake, c
}

// start starts a worker on pool that stops when the test ends.
func start(t *testing.T, pool *pgxpool.Pool, cfg *worker.Config) *worker.Worker {
	t.Helper()
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return w
}

// TestWorkerEndToEnd drains a real outbox with a real River client:
// committed intents are delivered once, rolled-back ones never, scheduled
// ones not before their time, and rows inserted by plain SQL are picked up.
func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			w.Stop(context.Background())
		}
	}()

	body := func(to string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"from":"billing@example.com","to":[%q],"subject":"Invoice","text":"x"}`, to))
	}
	for i := range 20 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: body(fmt.Sprintf("c%d@example.com", i))}); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			err = tx.Rollback(ctx) // four invoices fail: their emails must never go out
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	sendAt := time.Now().Add(1500 * time.Millisecond)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "reminder:1", Payload: body("later@example.com"), SendAt: sendAt})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('php:order:1', 'email', $1)`,
		string(body("sql@example.com"))); err != nil {
		t.Fatal(err)
	}

	// 16 committed invoices, the scheduled reminder and the SQL row.
	if err := fake.WaitDeliveries(ctx, 18); err != nil {
		t.Fatalf("waiting for 18 deliveries: %v (have %d)", err, len(fake.Deliveries()))
	}
	stopped = true
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, d := range fake.Deliveries() {
		perKey[d.IdempotencyKey]++
		if d.IdempotencyKey == "reminder:1" && d.DeliveredAt.Before(sendAt) {
			t.Errorf("scheduled intent delivered at %s, before its time %s", d.DeliveredAt, sendAt)
		}
	}
	for i := range 20 {
		key := fmt.Sprintf("invoice:%d", i)
		want := 1
		if i%5 == 0 {
			want = 0
		}
		if perKey[key] != want {
			t.Errorf("%s delivered %d times, want %d", key, perKey[key], want)
		}
	}
	if perKey["php:order:1"] != 1 || len(fake.Deliveries()) != 18 {
		t.Errorf("deliveries %v", perKey)
	}
	st, err := ob.Stats(ctx)
	if err != nil || st.Counts[outbox.StateSent] != 18 {
		t.Fatalf("stats %+v, %v", st, err)
	} // The graceful stop ended the worker's lease at once (issue 24): what
	// it left sending would go to another worker at its next sweep.
	var held, stoppedLeases int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE ended_at IS NULL), count(*) FILTER (WHERE end_reason = 'stopped')
		FROM sendonce_worker`).Scan(&held, &stoppedLeases); err != nil || held != 0 || stoppedLeases != 1 {
		t.Errorf("leases after Stop: %d held, %d stopped (%v); want 0 and 1", held, stoppedLeases, err)
	}
}

// TestWorkerReconcilesStrandedIntents: intents whose River job ended
// without them (deleted or cancelled in the River UI, discarded by a River
// client that does not know sendonce's kind) are sent by a running worker.
// Only a database upgraded from a release before the drain holds intents
// with River jobs of their own: the fixture gives them theirs
// (outboxtest.GiveJobs), as such a release did at enqueue.
func TestWorkerReconcilesStrandedIntents(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	hows := []string{
		`DELETE FROM river_job WHERE id = $1`,
		`UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`,
		`UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`,
	}
	var keys []string
	for i := range hows {
		key := fmt.Sprintf("stranded:%d", i)
		keys = append(keys, key)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key,
				Payload: json.RawMessage(fmt.Sprintf(`{"from":"a@example.com","to":["s%d@example.com"],"text":"x"}`, i))})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	outboxtest.GiveJobs(t, pool, keys...)
	for i, how := range hows {
		rec := outboxtest.Get(t, ob, keys[i])
		if rec.JobID == nil {
			t.Fatalf("%s has no job after GiveJobs", keys[i])
		}
		if _, err := pool.Exec(ctx, how, *rec.JobID); err != nil {
			t.Fatal(err)
		}
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, SweepInterval: 20 * time.Millisecond})
	if err := fake.WaitDeliveries(ctx, 3); err != nil {
		t.Fatalf("stranded intents not sent: %v (%d deliveries)", err, len(fake.Deliveries()))
	}
}

// TestNewRefusesSettingsThatBreakTheGuarantee: a window longer than the
// API keeps keys, or as many attempts as the River job allows (River would
// discard the job while the intent is still pending).
func TestNewRefusesSettingsThatBreakTheGuarantee(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL("http://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, send := range []worker.SendConfig{{ReplayWindow: outbox.MaxReplayWindow + time.Second}, {MaxAttempts: worker.MaxAttempts + 1}} {
		if _, err := worker.New(pool, &worker.Config{Client: c, Send: send}); err == nil {
			t.Errorf("New with %+v succeeded", send)
		}
	}
	// The limits themselves are accepted: what New refused was the settings.
	limits := worker.SendConfig{ReplayWindow: outbox.MaxReplayWindow, MaxAttempts: worker.MaxAttempts}
	if _, err := worker.New(pool, &worker.Config{Client: c, Send: limits}); err != nil {
		t.Errorf("New with %+v: %v", limits, err)
	} // A lease too short to renew in time (five renewals a lease) would
	// have live workers taken for dead.
	for _, lease := range []time.Duration{-time.Second, 100 * time.Millisecond} {
		if _, err := worker.New(pool, &worker.Config{Client: c, Lease: lease}); err == nil || !strings.Contains(err.Error(), "Config.Lease") {
			t.Errorf("New with lease %s: %v, want a refusal naming the lease", lease, err)
		}
	}
}

// TestNewRefusesPlainHTTPOffLoopback: New refuses what `sendonce work`
// refuses, a client whose base URL is plain http to a host off this
// machine (every send would be refused, each intent parked one by one
// after the start), naming the host and the fix; https, and plain http to
// loopback (a local fake API), are taken.
func TestNewRefusesPlainHTTPOffLoopback(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	for base, refused := range map[string]bool{
		"http://mail.example.com":  true,
		"http://10.0.0.7:8025":     true,
		"https://mail.example.com": false,
		"http://127.0.0.1:1":       false,
		"http://localhost:8025":    false,
	} {
		c, err := client.New(client.WithAPIKey("oe_test_LEAKCHECK00000000"), client.WithBaseURL(base))
		if err != nil {
			t.Fatal(err)
		}
		_, err = worker.New(pool, &worker.Config{Client: c})
		switch {
		case refused && !errors.Is(err, client.ErrInsecureBaseURL):
			t.Errorf("New with base URL %s: %v, want an error matching client.ErrInsecureBaseURL", base, err)
		case refused && (!strings.Contains(err.Error(), strings.TrimPrefix(base, "http://")) || !strings.Contains(err.Error(), "use https")):
			t.Errorf("New with base URL %s: %q, want the host and the fix named", base, err)
		case refused && strings.Contains(err.Error(), "LEAKCHECK"):
			t.Errorf("the API key is in the error: %q", err)
		case !refused && err != nil:
			t.Errorf("New with base URL %s: %v", base, err)
		}
	}
}

// TestRateLimitLongerThanSnoozes: the API answers 429 for longer than
// MaxSnoozes × RateLimitWait; nothing is parked failed, and everything is
// sent once the limit lifts.
func TestRateLimitLongerThanSnoozes(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	if err := fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultRateLimit}); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("limited:%d", i),
				Payload: fmt.Sprintf(`{"from":"a@example.com","to":["l%d@example.com"],"text":"x"}`, i)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 4,
		Send: worker.SendConfig{MaxSnoozes: 1, RateLimitWait: 50 * time.Millisecond}})
	// Far more 429s than the snoozes allowed: four per intent.
	if err := fake.WaitRequests(ctx, 4*n*2); err != nil {
		t.Fatal(err)
	}
	if st, err := ob.Stats(ctx); err != nil || st.Counts[outbox.StateFailed] != 0 {
		t.Fatalf("while rate limited: %+v, %v; want none failed", st, err)
	}
	if err := fake.SetFaults(); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, n); err != nil {
		t.Fatalf("after the limit lifted: %v (%d deliveries)", err, len(fake.Deliveries()))
	}
	if st, err := ob.Stats(ctx); err != nil || st.Counts[outbox.StateFailed] != 0 {
		t.Fatalf("after: %+v, %v; want none failed", st, err)
	}
}
