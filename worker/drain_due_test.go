package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// An idle drain makes no look every sweep interval: it sleeps until its
// queue's next intent comes due, or a notification. The sweep interval
// here is an hour, so only those wakes can send the intents within the
// test: one enqueued to go out in two seconds (its enqueue notifies; the
// drain's look then reads its due time), and one whose first attempt
// fails with a 503 (this worker's record of the retry wakes it at the
// retry's time, a second later).
func TestDrainSleepsUntilTheNextDueTime(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	for _, tc := range []struct {
		name   string
		sendAt time.Duration
		fault  bool
	}{{"send time", 2 * time.Second, false}, {"retry", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, pool, ob, fake, c := e2eSetup(t)
			if tc.fault {
				if err := fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503, Times: 1}); err != nil {
					t.Fatal(err)
				}
				// The client's own retries off: the worker records the
				// retry on the row.
				var err error
				if c, err = client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()),
					client.WithMaxRetries(0)); err != nil {
					t.Fatal(err)
				}
			}
			start(t, pool, &worker.Config{Client: c, SweepInterval: time.Hour})
			in := outbox.Intent{Key: "due:1", Payload: body("due@example.com")}
			if tc.sendAt > 0 {
				in.SendAt = time.Now().Add(tc.sendAt)
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.Enqueue(ctx, tx, in)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := fake.WaitDeliveries(wctx, 1); err != nil {
				t.Fatalf("the intent was not sent: %v (%d requests)", err, len(fake.Requests()))
			}
			waitSettled(t, ob, 1)
			if n := len(fake.Requests()); tc.fault && n != 2 {
				t.Errorf("%d requests, want 2: the failed attempt and the worker's retry", n)
			}
		})
	}
}
