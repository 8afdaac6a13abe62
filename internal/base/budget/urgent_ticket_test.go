package budget_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// An urgent send that comes while bulk sends nap for tokens leased ahead
// takes the next token: the bulk sends step aside for it (WaitBulk), so it
// waits about one token's spacing, not for the turns the bulk sends took
// before it came, which none of them uses while it waits.
func TestUrgentSendTakesTheNextTokenBeforeBulkOnes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rate = 20.0 // a token every 50 ms, leases of 10
	b := budget.New(pool, "sha256:urgent", budget.Config{Rate: rate})
	bulk := make(chan struct{}, 1<<16)
	for range 50 {
		go func() {
			for ctx.Err() == nil {
				if ok, _, _ := b.WaitBulk(ctx, time.Second); ok {
					bulk <- struct{}{}
				}
			}
		}()
	}
	bulkTokens := func(n int) {
		for range n {
			select {
			case <-bulk:
			case <-time.After(5 * time.Second):
				t.Fatal("the bulk sends took no token for 5 s")
			}
		}
	}
	bulkTokens(10) // the bulk sends nap for tokens leased ahead
	var waits []time.Duration
	for range 10 {
		start := time.Now()
		ok, _, err := b.Wait(ctx, 5*time.Second)
		if !ok || err != nil {
			t.Fatalf("the urgent send: ok %v, %v", ok, err)
		}
		waits = append(waits, time.Since(start))
		bulkTokens(3) // the next one comes at another point of a lease
	}
	slices.Sort(waits)
	t.Logf("an urgent send among 50 bulk ones at %g/s waited %v", rate, waits)
	if p90 := waits[8]; p90 > 150*time.Millisecond {
		t.Fatalf("an urgent send among bulk ones waited %s (the 9th of 10), want about a token's spacing (50 ms), at most three", p90)
	}
}
