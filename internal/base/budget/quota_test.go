package budget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// quotaBudget is a budget of 20 a second on a database of its own, its
// clock at *now (22:00 UTC, two hours before the daily reset), with its
// first token taken.
func quotaBudget(ctx context.Context, t *testing.T) (*Budget, *pgxpool.Pool, *time.Time) {
	t.Helper()
	pool := pgtest.NewDB(t)
	now := time.Date(2031, 3, 4, 22, 0, 0, 0, time.UTC)
	b := New(pool, "fp", Config{Rate: 20, Now: func() time.Time { return now }})
	if ok, _, err := b.Wait(ctx, time.Second); err != nil || !ok {
		t.Fatalf("first token: %t %v", ok, err)
	}
	return b, pool, &now
}

// A 429 whose body says the daily quota is exhausted pauses the fleet
// until the reset (the status says "quota exhausted until"), with one probe
// a minute, and does not cut the rate: it is no evidence about the rate.
func TestQuotaAnswerPausesUntilTheReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, pool, now := quotaBudget(ctx, t)
	// The worker tells Answered of a quota's 429, and neither Refused nor
	// Throttle.
	if err := b.Answered(ctx, Answer{Status: 429, Quota: PerDay}); err != nil {
		t.Fatal(err)
	}
	sts, err := Read(ctx, pool)
	if err != nil || len(sts) != 1 {
		t.Fatalf("%v %v", sts, err)
	}
	if d := sts[0].Describe(); !strings.Contains(d, "daily quota exhausted until 2031-03-05T00:00:00Z") || !strings.Contains(d, "the API said so") || sts[0].Throttles != 0 {
		t.Fatalf("status %q (throttles %d), want the quota exhausted until midnight and no cut", d, sts[0].Throttles)
	}
	// The next send waits: the probe is a minute away.
	if ok, retryIn, err := b.Wait(ctx, 10*time.Millisecond); err != nil || ok || retryIn < 50*time.Second {
		t.Fatalf("while exhausted: ok %t retry in %s %v; want a wait for the probe", ok, retryIn, err)
	}
	// A minute on, one probe goes.
	*now = now.Add(time.Minute)
	b.store.quota.state.holdUntil = time.Time{}
	if ok, _, err := b.Wait(ctx, 10*time.Millisecond); err != nil || !ok {
		t.Fatalf("a minute on: ok %t %v; want the probe", ok, err)
	}
	if ok, _, _ := b.Wait(ctx, 10*time.Millisecond); ok {
		t.Fatal("a second send went with the probe")
	}
	// Past midnight the quota is whole again.
	*now = now.Add(3 * time.Hour)
	b.store.quota.state.holdUntil = time.Time{}
	if ok, _, err := b.Wait(ctx, time.Second); err != nil || !ok {
		t.Fatalf("after the reset: ok %t %v", ok, err)
	}
}

// A quota 429 is told to the budget by Answered alone; it leaves nothing
// behind that changes what a later 429 means. A quota 429 of an intent
// that had met a 429 before (its worker calls no Refused for it) used to
// leave a flag set that made the next intent's first 429, a rate 429, count
// as the quota's: not counted among the fleet's recent 429s, so no fleet
// signal, whatever the fleet's 429s.
func TestQuota429LeavesLaterRate429sAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, pool, _ := quotaBudget(ctx, t)
	// An intent's quota 429: the worker tells Answered, and no more.
	if err := b.Answered(ctx, Answer{Status: 429, Quota: PerDay}); err != nil {
		t.Fatal(err)
	}
	// Another intent's first 429, a rate 429 (no quota named).
	if err := b.Answered(ctx, Answer{Status: 429}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Refused(ctx, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	var refusals float64
	if err := pool.QueryRow(ctx, `SELECT recent_refusals FROM sendonce_rate_budget WHERE key_fingerprint = 'fp'`).Scan(&refusals); err != nil {
		t.Fatal(err)
	}
	if refusals < 0.5 {
		t.Fatalf("recent 429s of the fleet after an intent's first rate 429: %.2f, want it counted (about 1)", refusals)
	}
}
