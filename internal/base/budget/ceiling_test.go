package budget_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// tally counts the tokens a fleet takes and tells when a count is reached,
// so a test measures a window by tokens, not by a clock.
type tally struct {
	mu    sync.Mutex
	n     int
	waits map[int][]chan struct{}
}

func (c *tally) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	for _, ch := range c.waits[c.n] {
		close(ch)
	}
	delete(c.waits, c.n)
}

func (c *tally) load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// at is closed once n tokens have been taken.
func (c *tally) at(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.n >= n {
		close(ch)
		return ch
	}
	if c.waits == nil {
		c.waits = map[int][]chan struct{}{}
	}
	c.waits[n] = append(c.waits[n], ch)
	return ch
}

func await(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("gave up waiting for %s", what)
	}
}

// A worker started with a rate far below the fleet's (issue 22, hole 16:
// three workers at 20/s and a fourth at 1/h) paces its own sends at its
// own rate and leaves the fleet's alone: the fleet takes as many tokens as
// a fleet of the same three workers alone, over the same window, on the
// same database and machine (the ratio is immune to the machine's load).
// The mismatch is logged once, with both rates.
func TestMisconfiguredWorkerDoesNotStallTheFleet(t *testing.T) {
	// Not parallel: its seven workers would load the machine under the
	// other tests' measured rates; alone, it measures a ratio.
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const fast, slow = 20.0, 1.0 / 3600
	alone, with, slowTook := &tally{}, &tally{}, &tally{}
	take(ctx, t, fleet(pool, "sha256:alone", fast, 3), 10, alone.add)
	take(ctx, t, fleet(pool, "sha256:with-slow", fast, 3), 10, with.add)
	// The slow worker starts once the fleet has leased, as a worker
	// started late into a running fleet.
	await(ctx, t, with.at(1), "the fleet's first token")
	logs := &syncbuf.Buffer{}
	slowWorker := budget.New(pool, "sha256:with-slow", budget.Config{Rate: slow, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	take(ctx, t, []*budget.Budget{slowWorker}, 10, slowTook.add)

	// The window: 100 tokens of the fleet alone, after its first 40 (the
	// bucket's first second and a second of pace).
	await(ctx, t, alone.at(40), "40 tokens of the fleet alone")
	startAlone, startWith := alone.load(), with.load()+slowTook.load()
	await(ctx, t, alone.at(startAlone+100), "100 more tokens of the fleet alone")
	gotAlone, gotWith := alone.load()-startAlone, with.load()+slowTook.load()-startWith
	t.Logf("over the same window: %d tokens alone, %d with the worker at 1/h", gotAlone, gotWith)
	if ratio := float64(gotWith) / float64(gotAlone); ratio < 0.9 || ratio > 1.1 {
		t.Fatalf("while three workers at 20/s alone took %d tokens, the same three and one at 1/h took %d (%.0f%%); want 90%% to 110%%",
			gotAlone, gotWith, 100*ratio)
	}
	if n := slowTook.load(); n > 1 {
		t.Fatalf("the worker at 1/h took %d tokens; want at most 1: its rate caps its own sends", n)
	}
	cancel()
	var mismatch []string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "fleet_rate=") {
			mismatch = append(mismatch, l)
		}
	}
	if len(mismatch) != 1 || !strings.Contains(mismatch[0], "worker_rate=0.000277") || !strings.Contains(mismatch[0], "fleet_rate=20") {
		t.Fatalf("mismatch logged %d times: %q; want once, with worker_rate=0.000277… and fleet_rate=20", len(mismatch), mismatch)
	}
}
