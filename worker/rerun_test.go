package worker_test

import (
	"context"
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
// the key and what to run instead. Only intents with River jobs of their
// own have a job to retry: those of a database upgraded from a release
// before the drain (outboxtest.GiveJobs, before the worker starts, so that
// the drain does not send them first).
func TestRiverUIRetryOfSettledIntent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: []fakeapi.Fault{{Kind: fakeapi.FaultErrorBefore, Status: 422, To: "refused@"}}})
	c, err := client.New(client.WithAPIKey("oe_test_rerun00000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ key, to, state, instead string }{
		{"invoice:refused", "refused@example.com", "failed", "sendonce retry invoice:refused"},
		{"invoice:sent", "ada@example.com", "sent", "enqueue it under a new key"},
	}
	for _, tc := range cases {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: tc.key,
				Payload: `{"from":"billing@example.com","to":["` + tc.to + `"],"subject":"Invoice","text":"x"}`})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		outboxtest.GiveJobs(t, pool, tc.key)
	}
	var logs syncbuf.Buffer
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 2,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	finished, unsubscribe := w.RiverClient().Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer unsubscribe()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	done := map[int64]*river.Event{}
	await := func(job int64) *river.Event {
		for done[job] == nil {
			select {
			case ev := <-finished:
				done[ev.Job.ID] = ev
			case <-ctx.Done():
				t.Fatalf("job %d did not finish", job)
			}
		}
		ev := done[job]
		delete(done, job)
		return ev
	}
	for _, tc := range cases { // both sent (or refused) before any River UI retry
		await(*outboxtest.Get(t, ob, tc.key).JobID)
	}
	for _, tc := range cases {
		job := *outboxtest.Get(t, ob, tc.key).JobID
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
