package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// testClock runs at the real pace from a start the test chooses, and jumps
// when the test moves it: the fake's rate limiter still refills, and a
// test reaches midnight without waiting for it.
type testClock struct {
	base   time.Time
	start  time.Time
	offset atomic.Int64
}

func newTestClock(base time.Time) *testClock { return &testClock{base: base, start: time.Now()} }

func (c *testClock) Now() time.Time {
	return c.base.Add(time.Since(c.start) + time.Duration(c.offset.Load()))
}

func (c *testClock) Move(d time.Duration) { c.offset.Add(int64(d)) }

// A daily quota is counted, not turned into a rate (issue 23, item 3, at
// the figures of its "done when"): a worker given 20/s,500/d against an
// API with a limit of 20/s and a quota of 500 a day sends exactly 500 at
// the rate (25 s), then waits (the status says "quota exhausted until"
// midnight UTC) with no intent failed, and sends the rest after midnight
// (the test clock's).
func TestDailyQuotaCountedByTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// 23:55 UTC of a day to come, so the reset is in the database's
	// future too.
	midnight := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 2)
	clock := newTestClock(midnight.Add(-5 * time.Minute))
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{Now: clock.Now,
		Rate:  []fakeapi.RateLimit{{Count: 20, Per: time.Second}},
		Quota: []fakeapi.Quota{{Count: 500}}})
	c, err := client.New(client.WithAPIKey("oe_test_quota0000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := worker.ParseRateLimits("20/s,500/d")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &worker.Config{Client: c, Concurrency: 10, RateLimits: limits, Send: worker.SendConfig{MaxPause: 2 * time.Second}}
	worker.SetQuotaClock(cfg, clock.Now)

	const n = 560
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			body := json.RawMessage(fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}`, i))
			if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: body}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, pool, cfg)

	if err := fake.WaitDeliveries(ctx, 500); err != nil {
		t.Fatal(err)
	}
	// The fleet stops by its own count: the status says so.
	var status string
	for !strings.Contains(status, "quota exhausted until") {
		if ctx.Err() != nil {
			t.Fatalf("no quota exhausted in the status: %q", status)
		}
		sts, err := budget.Read(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) == 1 {
			status = sts[0].Describe()
		}
		time.Sleep(20 * time.Millisecond) // polls the status, which has no event to await
	}
	want := "daily quota exhausted until " + midnight.Format(time.RFC3339)
	if !strings.Contains(status, want) {
		t.Fatalf("status %q, want it to say %q", status, want)
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	accepted, refused := len(fake.Deliveries()), fake.QuotaRefused()
	t.Logf("quota-exhausted: accepted=%d quota_429s=%d status=%q", accepted, refused, status)
	if accepted != 500 || st.Counts[outbox.StateFailed] != 0 {
		t.Fatalf("before midnight: %d accepted, %d failed; want exactly 500 accepted and none failed", accepted, st.Counts[outbox.StateFailed])
	}

	// Past midnight UTC the quota resets and the rest go.
	clock.Move(10 * time.Minute)
	if err := fake.WaitDeliveries(ctx, n); err != nil {
		t.Fatalf("after the reset: %d of %d delivered: %v", len(fake.Deliveries()), n, err)
	}
	st, err = ob.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quota-reset: accepted=%d quota_429s=%d failed=%d", len(fake.Deliveries()), fake.QuotaRefused(), st.Counts[outbox.StateFailed])
	if st.Counts[outbox.StateFailed] != 0 || len(fake.Deliveries()) != n {
		t.Fatalf("after the reset: %d delivered, %d failed; want %d and 0", len(fake.Deliveries()), st.Counts[outbox.StateFailed], n)
	}
}
