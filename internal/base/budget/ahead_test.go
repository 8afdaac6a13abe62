package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// A send that holds a token at a low rate takes the next tokens its
// worker has leased, due within the bound, without waiting: each with its
// own time, the rate's spacing apart, so the sends keep the rate while
// their intents are claimed together. Not past the bound, and not at a
// rate whose tokens come closer than 10 ms apart (one send's request may
// outlast the spacing).
func TestTakeAhead(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	b := budget.New(pool, "sha256:ahead", budget.Config{Rate: 20})
	defer b.Close()
	first, err := b.Acquire(ctx, 5*time.Second, false)
	if err != nil || !first.OK {
		t.Fatalf("Acquire: %+v, %v", first, err)
	}
	// Eight sends that made no request give their tokens back: the worker
	// holds them, due at the rate's spacing from now.
	b.Return(8)
	var ats []time.Time
	for {
		tk, ok := b.TakeAhead(250*time.Millisecond, false)
		if !ok {
			break
		}
		ats = append(ats, tk.At)
	}
	if len(ats) < 4 || len(ats) > 6 {
		t.Fatalf("%d tokens taken ahead of 8 held at 20/s, want those due within 250 ms: 4 to 6", len(ats))
	}
	for i, at := range ats {
		if wait := time.Until(at); wait > 250*time.Millisecond {
			t.Errorf("token %d due in %s, past the 250 ms asked", i, wait)
		}
		if i > 0 {
			if gap := at.Sub(ats[i-1]); gap < 45*time.Millisecond || gap > 55*time.Millisecond {
				t.Errorf("tokens %d and %d %s apart, want the rate's 50 ms", i-1, i, gap)
			}
		}
	}
	t.Logf("%d tokens ahead of the first", len(ats))

	fast := budget.New(pool, "sha256:ahead-fast", budget.Config{Rate: 1000})
	defer fast.Close()
	if tk, err := fast.Acquire(ctx, 5*time.Second, false); err != nil || !tk.OK {
		t.Fatalf("Acquire at 1000/s: %+v, %v", tk, err)
	}
	fast.Return(8)
	if _, ok := fast.TakeAhead(250*time.Millisecond, false); ok {
		t.Error("a token taken ahead at 1000/s (1 ms apart): want none")
	}

}
