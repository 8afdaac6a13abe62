package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// startLiveness runs a liveness of the given lease over its own pool until
// the test ends.
func startLiveness(t *testing.T, pool *pgxpool.Pool, lease time.Duration) *liveness {
	l, _ := runLiveness(t, pool, lease, "river-test")
	return l
}

// runLiveness is startLiveness with a kill: it stops the renewals at once
// (no release), as a worker that dies, and returns when they have stopped.
func runLiveness(t *testing.T, pool *pgxpool.Pool, lease time.Duration, riverClientID string) (*liveness, func()) {
	t.Helper()
	l := newLiveness(pool, lease, slog.New(slog.DiscardHandler))
	if err := l.start(t.Context(), riverClientID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	kill := func() { cancel(); <-done }
	t.Cleanup(kill)
	return l, kill
}

// awaitDone waits for ctx to end, for at most bound.
func awaitDone(t *testing.T, ctx context.Context, bound time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(bound):
		t.Fatalf("%s: still running after %s", what, bound)
	}
}

// Issue 24: a worker alive whose lease a sweeper ended (it was paused past
// it) stops what it sends under the old epoch, which records nothing, and
// claims under a new epoch.
func TestLivenessTakesANewEpochWhenItsLeaseWasEnded(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	l := startLiveness(t, pool, time.Second)
	old, ok := l.owner()
	if !ok {
		t.Fatal("no lease held after start")
	}
	var host string
	var pid int
	if err := pool.QueryRow(t.Context(), `SELECT host, pid FROM sendonce_worker WHERE epoch = $1 AND ended_at IS NULL`, old).Scan(&host, &pid); err != nil || pid == 0 {
		t.Fatalf("the lease row: %q %d, %v", host, pid, err)
	}
	send, release := l.bind(context.Background(), old)
	defer release()
	pgtest.Exec(t, pool, `UPDATE sendonce_worker SET ended_at = now(), end_reason = 'lapsed' WHERE epoch = $1`, old)

	awaitDone(t, send, 10*time.Second, "the send under the ended lease")
	if !errors.Is(context.Cause(send), sendstate.ErrLeaseLost) {
		t.Errorf("the send's cause: %v, want ErrLeaseLost", context.Cause(send))
	}
	var now int32
	for deadline := time.Now().Add(10 * time.Second); ; {
		if now, ok = l.owner(); ok && now != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("owner after the lease ended: %d, %v; want a new epoch (old %d)", now, ok, old)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held, err := sendstate.LeaseHeld(t.Context(), pool, now); err != nil || !held {
		t.Fatalf("new epoch %d held = %v, %v", now, held, err)
	}
	if later, _ := l.bind(context.Background(), old); later.Err() == nil {
		t.Error("a send bound to the old epoch after it ended was not cancelled")
	}
}

// A worker that cannot renew its lease (the database unreachable) stops
// its sends and claims nothing once nine tenths of the lease have passed
// on its own clock, before any sweeper may end the lease.
func TestLivenessStopsSendsWhenItCannotRenew(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := startLiveness(t, pool, time.Second)
	epoch, ok := l.owner()
	if !ok {
		t.Fatal("no lease held after start")
	}
	send, release := l.bind(context.Background(), epoch)
	defer release()
	pool.Close() // every renewal fails from now on
	awaitDone(t, send, 10*time.Second, "the send of a worker that cannot renew")
	if _, ok := l.owner(); ok {
		t.Error("a worker that cannot renew its lease still claims")
	}
	if !errors.Is(context.Cause(send), sendstate.ErrLeaseLost) {
		t.Errorf("the send's cause: %v, want ErrLeaseLost", context.Cause(send))
	}
}

// awaitSweeps waits for l.sweeps() to be want, for at most bound.
func awaitSweeps(t *testing.T, l *liveness, want bool, bound time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(bound); l.sweeps() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: sweeps() still %v after %s", what, !want, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 23, item 8: of two workers the first is the fleet's sweeper and
// the second is not; when the first dies (no renewal, no release), the
// second takes over once the dead lease's end has passed. Each sweeps
// until its first renewal.
func TestLivenessSweeperTakesOver(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	first, kill := runLiveness(t, pool, time.Second, "river-first")
	second := startLiveness(t, pool, time.Second)
	if !second.sweeps() {
		t.Fatal("a lease just taken does not sweep before its first renewal")
	}
	awaitSweeps(t, second, false, 10*time.Second, "the second worker")
	if !first.sweeps() {
		t.Fatal("the first worker is not the sweeper")
	}
	kill()
	killed := time.Now()
	awaitSweeps(t, second, true, 10*time.Second, "the second worker after the first died")
	t.Logf("took over %s after the first stopped renewing a lease of 1s", time.Since(killed).Round(time.Millisecond))
}
