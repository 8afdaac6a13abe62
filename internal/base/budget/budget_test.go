package budget_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// take has senders take tokens from the budgets until ctx ends, and calls
// taken for each token taken.
func take(ctx context.Context, t *testing.T, budgets []*budget.Budget, sendersEach int, taken func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, b := range budgets {
		for range sendersEach {
			wg.Go(func() {
				for ctx.Err() == nil {
					ok, _, err := b.Wait(ctx, time.Second)
					if err != nil && ctx.Err() == nil {
						t.Error(err)
						return
					}
					if ok {
						taken()
					}
				}
			})
		}
	}
	t.Cleanup(wg.Wait)
}

// drain has senders take tokens from the budgets until ctx ends, and
// counts them.
func drain(ctx context.Context, t *testing.T, budgets []*budget.Budget, sendersEach int) *atomic.Int64 {
	t.Helper()
	n := new(atomic.Int64)
	take(ctx, t, budgets, sendersEach, func() { n.Add(1) })
	return n
}

// rateOver counts the tokens taken over d, after a settling second.
func rateOver(n *atomic.Int64, d time.Duration) float64 {
	time.Sleep(time.Second) // measure, not synchronise: the window is the measurement
	start, at := n.Load(), time.Now()
	time.Sleep(d)
	return float64(n.Load()-start) / time.Since(at).Seconds()
}

func fleet(pool *pgxpool.Pool, key string, rate float64, size int) []*budget.Budget {
	out := make([]*budget.Budget, size)
	for i := range out {
		out[i] = budget.New(pool, key, budget.Config{Rate: rate})
	}
	return out
}

// Three workers sharing one API key send at the configured rate together,
// not three times it.
func TestFleetKeepsTheRate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := drain(ctx, t, fleet(pool, "sha256:fleet", 40, 3), 10)
	if got := rateOver(n, 3*time.Second); got < 36 || got > 44 {
		t.Fatalf("three workers at 40/s sent %.1f/s together, want 40 ± 10%%", got)
	}
}

// A worker that dies while holding tokens takes at most a sliver of the
// budget with it: the others go on at the rate.
func TestWorkerDiesHoldingTokens(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workers := fleet(pool, "sha256:dies", 40, 3)
	dyingCtx, die := context.WithCancel(ctx)
	drain(dyingCtx, t, workers[:1], 10)
	n := drain(ctx, t, workers[1:], 10)
	time.Sleep(500 * time.Millisecond) // let the doomed worker hold tokens
	die()
	if got := rateOver(n, 3*time.Second); got < 36 || got > 44 {
		t.Fatalf("after a worker died the others sent %.1f/s, want 40 ± 10%%", got)
	}
}

// A Retry-After pauses the whole fleet; sends resume after it.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	a, b := budget.New(pool, "sha256:pause", budget.Config{Rate: 50}), budget.New(pool, "sha256:pause", budget.Config{Rate: 50})
	if ok, _, err := a.Wait(ctx, time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := a.Throttle(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The other worker learns of the pause from the shared row.
	start := time.Now()
	ok, retryIn, err := b.Wait(ctx, 200*time.Millisecond)
	if ok || err != nil || retryIn < time.Second {
		t.Fatalf("during the pause: ok %v, retry in %s, %v; want no token and about 1.5 s", ok, retryIn, err)
	}
	ok, _, err = b.Wait(ctx, 5*time.Second)
	if waited := time.Since(start); !ok || err != nil || waited < 1300*time.Millisecond {
		t.Fatalf("after the pause: ok %v, %v after %s; want a token after about 1.5 s", ok, err, waited)
	}
	sts, err := budget.Read(ctx, pool)
	// Cut once (to 45/s), then grown back towards the ceiling by demand.
	if err != nil || len(sts) != 1 || sts[0].Rate < 45 || sts[0].Rate > 50 || sts[0].Throttles != 1 || sts[0].Ceiling != 50 {
		t.Fatalf("status %+v, %v: want one cut, a rate of 45 to 50 of the ceiling 50", sts, err)
	}
}

// With no configured rate the fleet starts slow and ramps up with use
// (slow start), until a 429 cuts the rate; from then it is a limit.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := budget.New(pool, "sha256:discover", budget.Config{})
	for range 1000 {
		if ok, _, err := b.Wait(ctx, time.Second); !ok || err != nil {
			t.Fatal("a slow-starting budget refused a token", err)
		}
	}
	if err := b.Throttle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	sts, err := budget.Read(ctx, pool)
	if err != nil || len(sts) != 1 || sts[0].Rate < 1 || sts[0].Ceiling != 0 {
		t.Fatalf("after the first 429: %+v, %v", sts, err)
	}
	// The rate is now a limit, growing slowly while there is demand.
	limit := sts[0].Rate
	n := drain(ctx, t, []*budget.Budget{b}, 5)
	if got := rateOver(n, 2*time.Second); got > limit*1.5+5 {
		t.Fatalf("after the 429 the fleet sent %.1f/s, from a limit of %.1f/s", got, limit)
	}
}

// Close ends every wait at once, however many send wait (issue 23: a stop
// is prompt): each returns no token, and no error, so that its job is
// snoozed before its claim and no attempt is spent.
func TestCloseEndsEveryWait(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	b := budget.New(pool, "sha256:close", budget.Config{Rate: 1.0 / 3600})
	if ok, _, err := b.Wait(ctx, time.Second); !ok || err != nil {
		t.Fatal("the first token:", ok, err)
	}
	const waiting = 500
	var started, done sync.WaitGroup
	var got atomic.Int64
	for range waiting {
		started.Add(1)
		done.Go(func() {
			started.Done()
			ok, retryIn, err := b.Wait(ctx, time.Hour)
			if ok || err != nil || retryIn <= 0 {
				t.Errorf("a wait cut short by Close: ok %v, retry in %s, %v; want no token, a retry later, no error", ok, retryIn, err)
			}
			got.Add(1)
		})
	}
	started.Wait()
	b.Close()
	done.Wait()
	if got.Load() != waiting {
		t.Fatalf("%d waits returned, want %d", got.Load(), waiting)
	}
	if ok, _, err := b.Wait(ctx, time.Hour); ok || err != nil {
		t.Fatalf("a wait after Close: ok %v, %v; want no token at once", ok, err)
	}
}
