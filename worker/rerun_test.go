package worker_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestRiverUIRetryOfSettledIntent: Retry in the River UI (River's
// JobRetry) on the job of an intent that failed, or was sent, sends
// nothing, leaves the intent as it was, and logs a WARN line that names
// the key and what to run instead.
func TestRiverUIRetryOfSettledIntent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: []fakeapi.Fault{{Kind: fakeapi.FaultErrorBefore, Status: 422, To: "refused@"}}})
	c, err := client.New(client.WithAPIKey("oe_test_rerun00000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	w := start(t, pool, &worker.Config{Client: c, Concurrency: 2,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	finished, unsubscribe := w.RiverClient().Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer unsubscribe()

	enqueue := func(key, to string) int64 {
		var job int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key,
				Payload: `{"from":"billing@example.com","to":["` + to + `"],"subject":"Invoice","text":"x"}`})
			if err == nil {
				job = *res.Record.JobID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	await := func(job int64) *river.Event {
		for {
			select {
			case ev := <-finished:
				if ev.Job.ID == job {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("job %d did not finish", job)
			}
		}
	}
	for _, tc := range []struct{ key, to, state, instead string }{
		{"invoice:refused", "refused@example.com", "failed", "sendonce retry invoice:refused"},
		{"invoice:sent", "ada@example.com", "sent", "enqueue it under a new key"},
	} {
		job := enqueue(tc.key, tc.to)
		await(job)
		if got := outboxtest.Get(t, ob, tc.key).State; string(got) != tc.state {
			t.Fatalf("%s: state %s, want %s", tc.key, got, tc.state)
		}
		requests := len(fake.Requests())
		if _, err := w.RiverClient().JobRetry(ctx, job); err != nil {
			t.Fatal(err)
		}
		ev := await(job)
		if n := len(fake.Requests()); n != requests {
			t.Errorf("%s: the River UI retry made %d API requests, want none", tc.key, n-requests)
		}
		if got := outboxtest.Get(t, ob, tc.key).State; string(got) != tc.state {
			t.Errorf("%s: after the River UI retry the intent is %s, want it still %s", tc.key, got, tc.state)
		}
		var warned bool
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, `"key":"`+tc.key+`"`) &&
				strings.Contains(line, "River UI") && strings.Contains(line, tc.instead) {
				warned = true
			}
		}
		if !warned {
			t.Errorf("%s: the River UI retry (job %s, attempt %d) logged no WARN line with the key and %q; logs:\n%s",
				tc.key, ev.Job.State, ev.Job.Attempt, tc.instead, logs.String())
		}
	}
}
