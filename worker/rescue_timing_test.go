package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// deadLease takes a lease of length for a worker that never renews it and
// claims key under it for its drain, as a worker killed mid-send leaves
// its intent: sending, under a lease that ends unrenewed.
func deadLease(t *testing.T, pool *pgxpool.Pool, key string, length time.Duration) sendstate.Lease {
	t.Helper()
	ctx := context.Background()
	dead, err := sendstate.TakeLease(ctx, pool, sendstate.Lease{}, sendstate.Holder{Host: "killed", PID: 1}, length)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sendstate.ClaimDue(ctx, pool, 1, sendstate.ClaimOptions{Owner: dead.Epoch, Queue: outbox.DefaultQueue})
	if err != nil || len(cs) != 1 || cs[0].Record.Key != key {
		t.Fatalf("the dead worker's claim: %d claimed, %v; want %s", len(cs), err, key)
	}
	return dead
}

// A worker killed mid-send is found dead when its lease ends, not at the
// sweep after that: the fleet's sweeper times a sweep for the end of the
// first of the other leases, and a worker that takes the sweeper's role
// over from a dead sweeper sweeps at once. The sweep interval here is an
// hour, so only those sweeps can rescue the intent within the test.
func TestDeadLeaseRescuedAtItsEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	const lease = 3 * time.Second
	for _, tc := range []struct {
		name string
		// sweeper says the live worker is the fleet's sweeper (its lease
		// the lower id); otherwise the dead worker was, and the live one
		// takes over.
		sweeper bool
	}{{"the sweeper times its sweep", true}, {"the next worker takes over", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, pool, ob, fake, c := e2eSetup(t)
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "killed:1", Payload: body("killed@example.com")})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			dead := deadLease(t, pool, "killed:1", lease)
			if tc.sweeper {
				// A lease id above any the live worker takes: the lowest
				// held id is the sweeper.
				pgtest.Exec(t, pool, `UPDATE sendonce_worker SET id = id + 1000000 WHERE id = $1`, dead.ID)
			}
			start(t, pool, &worker.Config{Client: c, SweepInterval: time.Hour, Lease: time.Second, RestartGrace: time.Nanosecond})
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := fake.WaitDeliveries(wctx, 1); err != nil {
				t.Fatalf("the dead worker's intent was not sent: %v", err)
			}
			waitSettled(t, ob, 1)
		})
	}
}
