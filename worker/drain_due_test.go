package worker_test

import (
	"context"
	"errors"
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

// A retry recorded by a worker that then stops is sent at its time by
// another worker, whose drain never saw it recorded: only the recording
// worker's drain waits for a retry it recorded, so when its lease ends
// (here a stop; a crash the same, at the lease's end) the fleet's sweeper
// tells every drain to read its queue's next due time again. The sweep
// interval is an hour, so the drains' net (thirty intervals) cannot send it
// within the test. Without that wake it failed 3 times in 3.
func TestRetryOfAStoppedWorkerSentOnTime(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	ctx, pool, ob, fake, _ := e2eSetup(t)
	// The first attempt is told to come back in 3 s; the client's own
	// retries are off, so the worker records the retry on the row.
	if err := fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, Status: 503, RetryAfter: "3", Times: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	var workers []*worker.Worker
	for range 2 {
		w, err := worker.New(pool, &worker.Config{Client: c, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop(context.Background()) })
		workers = append(workers, w)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "retry:1", Payload: body("retry@example.com")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The retry recorded: which worker's claim it keeps.
	var recorder string
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for recorder == "" {
		err := pool.QueryRow(wctx, `SELECT w.river_client_id FROM sendonce_outbox o JOIN sendonce_worker w ON w.epoch = o.claimed_by
			WHERE o.idempotency_key = 'retry:1' AND o.state = 'pending' AND o.next_attempt_at > now()`).Scan(&recorder)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			select {
			case <-wctx.Done():
				t.Fatalf("the retry was not recorded: %v", wctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		case err != nil:
			t.Fatal(err)
		}
	}
	var survivor *worker.Worker
	for _, w := range workers {
		if w.RiverClient().ID() == recorder {
			if err := w.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			survivor = w
		}
	}
	if survivor == nil {
		t.Fatalf("no worker is %s, the retry's recorder", recorder)
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := fake.WaitDeliveries(dctx, 1); err != nil {
		t.Fatalf("the retry was not sent by the other worker: %v (%d requests)", err, len(fake.Requests()))
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("%d requests, want 2: the first attempt and the retry", n)
	}
}
