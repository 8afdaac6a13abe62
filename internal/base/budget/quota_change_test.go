package budget

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// Issue 44: a worker restarted with another quota counts against it at
// once, whatever a worker with the old one left in the row.

// quotaWorker is a worker of key "fp" at 20 a second with the daily quota
// perDay, on the clock *now.
func quotaWorker(pool *pgxpool.Pool, perDay int64, now *time.Time) *Budget {
	return New(pool, "fp", Config{Rate: 20, Quotas: []Quota{{Count: perDay, Per: PerDay}}, Now: func() time.Time { return *now }})
}

// sendAll has n sends wait for a token at once, as n jobs of a worker do,
// each for at most max; it returns how many got one and the shortest
// RetryIn of those that did not.
func sendAll(ctx context.Context, t *testing.T, b *Budget, n int, max time.Duration) (granted int, retryIn time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ok, in, err := b.Wait(ctx, max)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case ok:
				granted++
			case retryIn == 0 || in < retryIn:
				retryIn = in
			}
		})
	}
	wg.Wait()
	return granted, retryIn
}

// used is the fleet's stored daily count.
func used(ctx context.Context, t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(ctx, `SELECT used FROM sendonce_rate_quota WHERE key_fingerprint = 'fp' AND period = 'd'`).Scan(&n); err != nil {
		t.Fatalf("read the daily count: %v", err)
	}
	return n
}

// exhaustByCount has a worker at 3/d use its quota: three sends go, and
// the fourth finds it exhausted by the count (stored in the row).
func exhaustByCount(ctx context.Context, t *testing.T, pool *pgxpool.Pool, now *time.Time) *Budget {
	t.Helper()
	old := quotaWorker(pool, 3, now)
	if got, _ := sendAll(ctx, t, old, 3, time.Second); got != 3 {
		t.Fatalf("at 3/d with none used: %d of 3 sends got a token", got)
	}
	if ok, retryIn, err := old.Wait(ctx, 10*time.Millisecond); err != nil || ok || retryIn < 50*time.Second {
		t.Fatalf("the 4th send at 3/d: ok %t, retry in %s, %v; want none until the probe", ok, retryIn, err)
	}
	return old
}

// A quota raised by a restart takes effect at once (issue 44): at 3/d with
// 3 used and the exhaustion stored, a worker restarted with 10/d grants
// the 7 left at once to 13 waiting sends and refuses the rest until the
// probe, and the count goes on to 10, then starts again after midnight.
// It used to grant none ("retry in 55 s") and, after the probe, stop
// counting until midnight.
func TestRaisedQuotaTakesEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	now := time.Date(2031, 3, 4, 22, 0, 0, 0, time.UTC)
	exhaustByCount(ctx, t, pool, &now).Close()

	now = now.Add(5 * time.Second) // the restart
	b := quotaWorker(pool, 10, &now)
	defer b.Close()
	granted, retryIn := sendAll(ctx, t, b, 13, time.Second)
	if granted != 7 || retryIn < 50*time.Second {
		t.Fatalf("at 10/d with 3 used: %d of 13 sends got a token, the others retry in %s; want 7, the others a minute later (the probe)", granted, retryIn)
	}
	if n := used(ctx, t, pool); n != 10 {
		t.Fatalf("stored count after 3 + 7 sends: %d, want 10", n)
	}
	// Past midnight the count starts again, and still counts.
	now = now.Add(3 * time.Hour)
	b.store.quota.state.holdUntil = time.Time{}
	if granted, _ := sendAll(ctx, t, b, 2, time.Second); granted != 2 {
		t.Fatalf("after the reset: %d of 2 sends got a token", granted)
	}
	if n := used(ctx, t, pool); n != 2 {
		t.Fatalf("stored count of the new day after 2 sends: %d, want 2", n)
	}
}

// A quota lowered by a restart takes effect at once: with 5 used and a new
// limit of 3, nothing more goes (but the probe a minute on).
func TestLoweredQuotaTakesEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	now := time.Date(2031, 3, 4, 22, 0, 0, 0, time.UTC)
	old := quotaWorker(pool, 10, &now)
	if got, _ := sendAll(ctx, t, old, 5, time.Second); got != 5 {
		t.Fatalf("at 10/d: %d of 5 sends got a token", got)
	}
	old.Close()

	now = now.Add(5 * time.Second)
	b := quotaWorker(pool, 3, &now)
	defer b.Close()
	if granted, retryIn := sendAll(ctx, t, b, 4, time.Second); granted != 0 || retryIn < 50*time.Second {
		t.Fatalf("at 3/d with 5 used: %d of 4 sends got a token, the others retry in %s; want none until the probe", granted, retryIn)
	}
	if n := used(ctx, t, pool); n != 5 {
		t.Fatalf("stored count: %d, want 5", n)
	}
}

// A probe the API served while the count said exhausted turns the count
// off until the reset: the API allows more than that limit. A restart with
// another limit ends that: the operator's new limit is counted against.
func TestChangedQuotaCountsAgainAfterAServedProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	now := time.Date(2031, 3, 4, 22, 0, 0, 0, time.UTC)
	old := exhaustByCount(ctx, t, pool, &now)
	now = now.Add(time.Minute)
	old.store.quota.state.holdUntil = time.Time{}
	if ok, _, err := old.Wait(ctx, time.Second); err != nil || !ok {
		t.Fatalf("a minute on: ok %t %v; want the probe", ok, err)
	}
	if err := old.Answered(ctx, Answer{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := old.Wait(ctx, time.Second); err != nil || !ok {
		t.Fatalf("after the served probe: ok %t %v; want the count off", ok, err)
	}
	old.Close()
	if n := used(ctx, t, pool); n != 5 {
		t.Fatalf("stored count with the count off: %d, want 5 (it is still kept)", n)
	}

	now = now.Add(5 * time.Second)
	b := quotaWorker(pool, 10, &now)
	defer b.Close()
	if granted, retryIn := sendAll(ctx, t, b, 8, time.Second); granted != 5 || retryIn < 50*time.Second {
		t.Fatalf("at 10/d with 5 used: %d of 8 sends got a token, the others retry in %s; want 5, the others a minute later", granted, retryIn)
	}
	if n := used(ctx, t, pool); n != 10 {
		t.Fatalf("stored count: %d, want 10", n)
	}
}

// The API's own answer that the quota is exhausted holds the fleet
// whatever limit a restarted worker is configured with: the API counts the
// requests, and a configured number does not change its count. The probe
// a minute on finds out whether the API took the raise; once it serves
// one, the new limit is counted against.
func TestRaisedQuotaLeavesTheAPIsExhaustion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	now := time.Date(2031, 3, 4, 22, 0, 0, 0, time.UTC)
	old := quotaWorker(pool, 3, &now)
	if got, _ := sendAll(ctx, t, old, 3, time.Second); got != 3 {
		t.Fatalf("at 3/d: %d of 3 sends got a token", got)
	}
	if err := old.Answered(ctx, Answer{Status: 429, Quota: PerDay}); err != nil {
		t.Fatal(err)
	}
	old.Close()

	now = now.Add(5 * time.Second)
	b := quotaWorker(pool, 10, &now)
	defer b.Close()
	if granted, retryIn := sendAll(ctx, t, b, 5, time.Second); granted != 0 || retryIn < 50*time.Second {
		t.Fatalf("at 10/d after the API's quota 429: %d of 5 sends got a token, the others retry in %s; want none until the probe", granted, retryIn)
	}
	now = now.Add(time.Minute)
	b.store.quota.state.holdUntil = time.Time{}
	if ok, _, err := b.Wait(ctx, time.Second); err != nil || !ok {
		t.Fatalf("a minute on: ok %t %v; want the probe", ok, err)
	}
	if err := b.Answered(ctx, Answer{Status: 200}); err != nil {
		t.Fatal(err)
	}
	// 4 used (3 and the probe): 6 more of 10, then none.
	if granted, retryIn := sendAll(ctx, t, b, 9, time.Second); granted != 6 || retryIn < 50*time.Second {
		t.Fatalf("after the served probe at 10/d with 4 used: %d of 9 sends got a token, the others retry in %s; want 6", granted, retryIn)
	}
	if n := used(ctx, t, pool); n != 10 {
		t.Fatalf("stored count: %d, want 10", n)
	}
}
