package worker

// Tests for the holes an audit found in the guarantee (issue 10).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Hole 6: a send cut off by shutdown returned an error without
// context.Canceled, so River counted the attempt: at the last attempt a
// deploy parked the intent as failed.
func TestShutdownDoesNotBurnAttempts(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{MaxAttempts: 3}, fakeapi.Fault{Kind: fakeapi.FaultLatencyAfter, Delay: time.Minute}).on(p)
		h.enqueue(outbox.Intent{Key: "k:stop", Payload: emailBody("ada@example.com")})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			// Stop once the API has delivered and holds its answer back.
			if h.fake.WaitDeliveries(ctx, 1) == nil {
				cancel()
			}
		}()
		if p.perJob {
			// This attempt calls Work directly, not through rivertest.
			// River's executor gives the attempt back (the job is
			// interrupted, not failed) only when the job's context was
			// cancelled by the client's stop, with a cause internal to
			// River; rivertest cannot cancel that way, so under it this
			// cut-off attempt would be counted as an ordinary failure.
			// What the executor checks is what this asserts: an error
			// matching context.Canceled, not a JobCancel. The job is the
			// intent's real one from river_job, on the last attempt the
			// config allows.
			job := h.job("k:stop", 3)
			err := h.worker.Work(ctx, job)
			if !errors.Is(err, context.Canceled) || errors.As(err, new(*river.JobCancelError)) {
				t.Fatalf("error %v, want one matching context.Canceled, not a JobCancel", err)
			}
		} else {
			// The drain's sends run in its work context, which a stop that
			// gives up waiting cancels: the try, the last the config
			// allows, is given back, and the intent is due again at once.
			pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET tries = 2 WHERE idempotency_key = 'k:stop'`)
			if c, _ := h.drainOneIn(ctx); c == nil || c.Tries != 3 {
				t.Fatalf("claim %+v, want k:stop on its third try", c)
			}
			tries := outboxtest.Value[int](t, h.pool, `SELECT tries FROM sendonce_outbox WHERE idempotency_key = 'k:stop'`)
			due := outboxtest.Value[bool](t, h.pool, `SELECT coalesce(next_attempt_at <= now(), true) FROM sendonce_outbox WHERE idempotency_key = 'k:stop'`)
			if tries != 2 || !due {
				t.Fatalf("after the stop: %d tries, due %v; want the try given back (2) and due at once", tries, due)
			}
		}
		rec := h.get("k:stop")
		if rec.State != outbox.StatePending || !rec.Uncertain {
			t.Fatalf("record %+v, want pending and uncertain", rec)
		}
		// The next run replays it.
		h.fake.SetFaults()
		h.expect(h.try("k:stop", 3), "completed", false, "rerun")
		if rec := h.get("k:stop"); rec.State != outbox.StateSent || !rec.Replayed || len(h.fake.Deliveries()) != 1 {
			t.Fatalf("record %+v, deliveries %d", rec, len(h.fake.Deliveries()))
		}
	})
}

// Hole 5: an attempt that started just inside the window could run past
// it. Now no HTTP attempt goes on past the window's end.
func TestAttemptStopsAtTheWindowsEnd(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{ReplayWindow: time.Hour}, fakeapi.Fault{Kind: fakeapi.FaultLatency, Delay: time.Minute}).on(p)
		h.enqueue(outbox.Intent{Key: "k:edge", Payload: emailBody("ada@example.com")})
		if _, err := h.pool.Exec(context.Background(),
			`UPDATE sendonce_outbox SET first_attempt_at = now() - interval '59 minutes 58 seconds', attempts = 1, uncertain = true`); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		h.expect(h.try("k:edge", 2), "cancelled", false, "the attempt")
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the attempt ran %s, past the window's end", took)
		}
		if rec := h.get("k:edge"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window ended during the attempt") {
			t.Fatalf("record %+v", rec)
		}
	})
}

// Hole 8: the fake (like, perhaps, the real API) scopes idempotency keys per
// API key. An uncertain intent retried under a rotated key was delivered
// again; now it is parked. A certain one goes out under the new key.
func TestAPIKeyRotation(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 500, To: "lost@example.com"},
			fakeapi.Fault{Kind: fakeapi.FaultRateLimit, To: "limited@example.com", Times: 1}).on(p)
		h.enqueue(outbox.Intent{Key: "k:uncertain", Payload: emailBody("lost@example.com")})
		h.enqueue(outbox.Intent{Key: "k:certain", Payload: emailBody("limited@example.com")})
		h.expect(h.try("k:uncertain", 1), "retried", true, "first attempt")
		h.expect(h.try("k:certain", 1), "snoozed", false, "first attempt")
		delivered := len(h.fake.Deliveries())

		rotated, err := client.New(client.WithAPIKey("oe_test_rotated000000000"), client.WithBaseURL(h.fake.URL()),
			client.WithSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
		if err != nil {
			t.Fatal(err)
		}
		cfg := SendConfig{Observer: ObserverFunc(func(Outcome) {})}
		h.worker = newSendWorker(h.pool, rotated, &cfg)
		h.fake.SetFaults()

		h.expect(h.try("k:uncertain", 2), "cancelled", false, "uncertain intent under a new key")
		if rec := h.get("k:uncertain"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "API key changed") {
			t.Fatalf("record %+v", rec)
		}
		h.expect(h.try("k:certain", 1), "completed", false, "certain intent under a new key")
		rec := h.get("k:certain")
		if rec.State != outbox.StateSent || rec.APIKeyFingerprint != rotated.KeyFingerprint() {
			t.Fatalf("certain intent under a new key: %+v", rec)
		}
		if got := len(h.fake.Deliveries()); got != delivered+1 {
			t.Fatalf("%d deliveries after the rotation, want %d: only the certain intent's", got, delivered+1)
		}
	})
}

// A job that is no longer its intent's job (revived after a retry gave the
// intent a new one) sends nothing. Only a database upgraded from a release
// before the drain holds intents with jobs of their own (outboxtest.GiveJobs).
func TestSupersededJobSendsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	rec := h.enqueue(outbox.Intent{Key: "k:old", Payload: emailBody("ada@example.com")})
	if _, err := h.pool.Exec(context.Background(), `UPDATE sendonce_outbox SET job_id = job_id + 1000`); err != nil {
		t.Fatal(err)
	}
	if res, err := h.workJob(*rec.JobID, 1); err != nil || !completed(res) {
		t.Fatalf("%s, want completed", show(res, err))
	}
	if n := len(h.fake.Requests()); n != 0 || h.get("k:old").State != outbox.StatePending {
		t.Fatalf("%d requests; record %+v", n, h.get("k:old"))
	}
}
