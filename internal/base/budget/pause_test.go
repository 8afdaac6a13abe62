package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// status is the one budget row of the database.
func status(t *testing.T, pool *pgxpool.Pool) budget.Status {
	t.Helper()
	sts, err := budget.Read(context.Background(), pool)
	if err != nil || len(sts) != 1 {
		t.Fatalf("budgets %+v, %v: want one", sts, err)
	}
	return sts[0]
}

// A Retry-After far past MaxPause (issue 22, hole 15: a year) pauses the
// fleet for MaxPause only, and no worker is told to come back later than
// that; after it the fleet probes with single requests until the API
// serves one, then sends at its rate again.
func TestLongRetryAfterPausesAtMostMaxPause(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const maxPause = time.Second
	year := 365 * 24 * time.Hour
	cfg := budget.Config{Rate: 50, MaxPause: maxPause}
	a, b := budget.New(pool, "sha256:year", cfg), budget.New(pool, "sha256:year", cfg)
	if ok, _, err := a.Wait(ctx, time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := a.Throttle(ctx, year); err != nil {
		t.Fatal(err)
	}
	ok, retryIn, err := b.Wait(ctx, 100*time.Millisecond)
	if ok || err != nil || retryIn <= 0 || retryIn > maxPause {
		t.Fatalf("during the pause: ok %v, retry in %s, %v; want no token and a retry within the max pause, %s", ok, retryIn, err, maxPause)
	}
	if st := status(t, pool); st.PausedFor > maxPause || st.ProbingFor < year-time.Hour {
		t.Fatalf("after a Retry-After of a year: paused for %s, probing for %s; want a pause of at most %s, then probing for the rest of the year",
			st.PausedFor, st.ProbingFor, maxPause)
	}
	// After the pause a probe goes: one token.
	if ok, _, err := b.Wait(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("after the max pause: ok %v, %v; want a token for a probe", ok, err)
	}
	// The API served it: the probe is over, and the fleet sends again.
	if err := b.Served(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, pool); st.PausedFor != 0 || st.ProbingFor != 0 {
		t.Fatalf("after the probe was served: %+v, want neither paused nor probing", st)
	}
	if ok, _, err := a.Wait(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("after the probe: ok %v, %v; want a token", ok, err)
	}
}
