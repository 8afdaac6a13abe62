package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// yearRetryAfter is the Retry-After the audit of issue 22 sent: a year.
const yearRetryAfter = "31536000"

// withBudget gives the harness's worker the fleet's budget, as worker.New
// does, with no configured rate.
func (h *harness) withBudget() *harness {
	h.worker.budget = budget.New(h.pool, h.client.KeyFingerprint(), budget.Config{MaxPause: h.worker.cfg.MaxPause})
	return h
}

// A 429 with a year-long Retry-After (issue 22, hole 15) parks nothing and
// leaves no intent further out than MaxPause. Met by one intent in a fleet
// that sends a lot, it is that intent's own wait (issue 23): it comes back
// within MaxPause and the fleet sends the others meanwhile. Met where it
// is a fleet signal (a fleet that sent little lately), the fleet pauses
// for MaxPause at most; an intent's job that waits for the budget comes
// back within MaxPause too, and the drain claims nothing while it waits, so
// clearing the pause by hand leaves no intent a year away.
func TestYearLongRetryAfter(t *testing.T) {
	t.Parallel()
	for _, withBudget := range []bool{true, false} {
		t.Run(fmt.Sprintf("budget=%t", withBudget), func(t *testing.T) {
			t.Parallel()
			onPaths(t, func(t *testing.T, p path) {
				h := newHarness(t, SendConfig{},
					fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: yearRetryAfter, Key: "k:first"},
					fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: yearRetryAfter, Key: "k:second"}).on(p)
				if withBudget {
					h.withBudget()
				}
				for _, key := range []string{"k:first", "k:second", "k:third", "k:fourth"} {
					h.enqueue(outbox.Intent{Key: key, Payload: emailBody(strings.TrimPrefix(key, "k:") + "@example.com")})
				}
				snoozedWithin := func(key, what string) {
					t.Helper()
					r := h.try(key, 1)
					if latest := time.Now().Add(DefaultMaxPause); r.end != "snoozed" || r.err != nil || r.again.After(latest) {
						t.Fatalf("%s: %s; want a snooze of at most the max pause, %s", what, r, DefaultMaxPause)
					}
					if rec := h.get(key); rec.State != outbox.StatePending || rec.Snoozes != 0 {
						t.Fatalf("%s: %+v; want pending, no snooze counted", what, rec)
					}
				}
				if withBudget {
					// A fleet that sent 1,000 requests lately.
					pgtest.Exec(t, h.pool, `INSERT INTO sendonce_rate_budget (key_fingerprint, recent_requests, recent_at)
						VALUES ($1, 1000, now())`, h.client.KeyFingerprint())
				}
				snoozedWithin("k:first", "after a 429 asking for a year")
				if !withBudget {
					return
				}
				// One intent's 429: no fleet pause, the next intent sends.
				h.expect(h.try("k:third", 1), "completed", false, "another intent after one intent's 429 (no fleet pause)")
				// A fleet that has sent little lately: a second intent's 429
				// is a fleet signal, and the fleet pauses.
				pgtest.Exec(t, h.pool, `UPDATE sendonce_rate_budget SET recent_requests = 0`)
				snoozedWithin("k:second", "a second intent's 429 asking for a year")
				if p.perJob {
					snoozedWithin("k:fourth", "another intent waiting for the paused budget")
				} else {
					// The drain's slot waits for the budget before it claims:
					// the intent is not attempted meanwhile.
					h.expect(h.try("k:fourth", 1), "unclaimed", false, "another intent while the budget is paused")
					if rec := h.get("k:fourth"); rec.State != outbox.StatePending || rec.Attempts != 0 {
						t.Fatalf("k:fourth while the budget is paused: %+v; want pending, never attempted", rec)
					}
				}
				if n := len(h.fake.Requests()); n != 3 {
					t.Fatalf("%d requests, want the two that met the 429 and the one sent before", n)
				}
				st, err := budget.Read(context.Background(), h.pool)
				if err != nil || len(st) != 1 || st[0].PausedFor > DefaultMaxPause || st[0].PausedFor < DefaultMaxPause-time.Minute {
					t.Fatalf("the fleet's budget %+v, %v: want it paused for the max pause, %s", st, err, DefaultMaxPause)
				}

				// The pause cleared by hand (as docs/rate-limits.md says) and
				// the limit lifted: each intent sends when it is next tried.
				pgtest.Exec(t, h.pool, `UPDATE sendonce_rate_budget SET paused_until = 'epoch', probe_until = 'epoch'`)
				h.fake.SetFaults()
				for _, key := range []string{"k:first", "k:second", "k:fourth"} {
					h.expect(h.try(key, 1), "completed", false, key+" after the pause was cleared")
					if rec := h.get(key); rec.State != outbox.StateSent {
						t.Fatalf("%s: %+v, want sent", key, rec)
					}
				}
			})
		})
	}
}

// A 429 never parks an intent for the 429's sake: an attempted intent ends
// only when its replay window would end before the fleet sends again, and
// then its reason is the replay window's.
func TestRateLimitEndsOnlyWithTheReplayWindow(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{ReplayWindow: time.Minute},
			fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: yearRetryAfter}).withBudget().on(p)
		h.enqueue(outbox.Intent{Key: "k:window", Payload: emailBody("ada@example.com")})
		h.expect(h.try("k:window", 1), "cancelled", false, "the max pause outlasts the 1m window")
		rec := h.get("k:window")
		if rec.State != outbox.StateFailed || !strings.HasPrefix(rec.LastError, "replay window") {
			t.Fatalf("state %s, reason %q: want failed with the replay window's reason, not the 429's", rec.State, rec.LastError)
		}
		if got := fmt.Sprint(h.results()); got != "[budget_token rate_limited expired]" {
			t.Fatalf("outcomes %s, want [budget_token rate_limited expired]", got)
		}
	})
}

// An intent the API keeps answering 429 while it takes the others' (issue
// 23: a poison intent) backs off on its own: each try is snoozed, longer
// each time up to RateLimitWait, never parked; its 429s in a row carry
// over (in its job's metadata, or its row's rate_limited); and the fleet's
// rate is never cut, so the other intents send on at once.
func TestPoisonIntentBacksOffAlone(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultRateLimit, Key: "k:poison"}).withBudget().on(p)
		h.enqueue(outbox.Intent{Key: "k:poison", Payload: emailBody("poison@example.com")})
		// A fleet that sent 1,000 requests lately: the poison intent's
		// first 429 is no fleet signal either.
		pgtest.Exec(t, h.pool, `INSERT INTO sendonce_rate_budget (key_fingerprint, recent_requests, recent_at) VALUES ($1, 1000, now())`,
			h.client.KeyFingerprint())
		var waits []time.Duration
		for i := range 8 {
			other := fmt.Sprintf("k:other%d", i)
			h.enqueue(outbox.Intent{Key: other, Payload: emailBody("ada@example.com")})
			before := time.Now()
			r := h.try("k:poison", 1)
			h.expect(r, "snoozed", false, fmt.Sprintf("try %d of the poison intent", i+1))
			waits = append(waits, r.again.Sub(before).Round(time.Second))
			if r.rateLimited != i+1 {
				t.Fatalf("try %d: %d 429s in a row counted, want %d", i+1, r.rateLimited, i+1)
			}
			if rec := h.get("k:poison"); rec.State != outbox.StatePending {
				t.Fatalf("try %d: the poison intent is %s (%s), want pending", i+1, rec.State, rec.LastError)
			}
			h.expect(h.try(other, 1), "completed", false, fmt.Sprintf("%s after the poison intent's try %d", other, i+1))
		}
		for i, w := range waits {
			limit := min(DefaultRetryBase<<i, DefaultRateLimitWait)
			if w < max(limit/2, time.Second)-time.Second || w > limit+time.Second {
				t.Fatalf("the poison intent's waits %v: try %d waited %s, want %s to %s (exponential from %s, capped at %s, jittered)",
					waits, i+1, w, limit/2, limit, DefaultRetryBase, DefaultRateLimitWait)
			}
		}
		st, err := budget.Read(context.Background(), h.pool)
		if err != nil || len(st) != 1 || st[0].Throttles != 0 || st[0].PausedFor != 0 {
			t.Fatalf("the fleet's budget %+v, %v: want it never cut nor paused by one intent's 429s", st, err)
		}
	})
}

// rateLimitBackoff doubles from the base up to the limit, jitters the
// upper half, and honours a longer Retry-After.
func TestRateLimitBackoff(t *testing.T) {
	for _, tt := range []struct {
		n          int
		retryAfter time.Duration
		r          float64
		want       time.Duration
	}{
		{1, 0, 0, 500 * time.Millisecond},
		{1, 0, 0.999999, time.Second - time.Microsecond},
		{2, 0, 0, time.Second},
		{3, 0, 0.5, 3 * time.Second},
		{6, 0, 0, 15 * time.Second},
		{50, 0, 0.999999, 30*time.Second - 15*time.Microsecond},
		{1, time.Minute, 0.5, time.Minute},
		{6, 7 * time.Second, 0, 15 * time.Second},
	} {
		got := rateLimitBackoff(tt.n, tt.retryAfter, time.Second, 30*time.Second, tt.r)
		if got.Round(time.Millisecond) != tt.want.Round(time.Millisecond) {
			t.Errorf("rateLimitBackoff(%d, %s, r=%v) = %s, want %s", tt.n, tt.retryAfter, tt.r, got, tt.want)
		}
	}
}
