package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/budget"
	"github.com/sendonce/sendonce/internal/pgtest"
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

// A 429 with a year-long Retry-After (issue 22, hole 15) pauses the fleet
// for MaxPause at most: the intent that met it stays pending and its job
// comes back within MaxPause, and so does the job of another intent that
// waits for the budget, so clearing the pause by hand leaves no job a year
// away.
func TestYearLongRetryAfter(t *testing.T) {
	t.Parallel()
	for _, withBudget := range []bool{true, false} {
		t.Run(fmt.Sprintf("budget=%t", withBudget), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: yearRetryAfter, Key: "k:first"})
			if withBudget {
				h.withBudget()
			}
			h.enqueue(outbox.Intent{Key: "k:first", Payload: emailBody("ada@example.com")})
			h.enqueue(outbox.Intent{Key: "k:second", Payload: emailBody("grace@example.com")})

			res, err := h.work("k:first", 1)
			if latest := time.Now().Add(DefaultMaxPause); err != nil || !snoozed(res, 1) || res.Job.ScheduledAt.After(latest) {
				t.Fatalf("after a 429 asking for a year: %s; want a snooze of at most the max pause, %s", show(res, err), DefaultMaxPause)
			}
			if rec := h.get("k:first"); rec.State != outbox.StatePending || rec.Snoozes != 0 {
				t.Fatalf("after a 429 asking for a year: %+v; want pending, no snooze counted", rec)
			}
			if !withBudget {
				return
			}
			res, err = h.work("k:second", 1)
			if latest := time.Now().Add(DefaultMaxPause); err != nil || !snoozed(res, 1) || res.Job.ScheduledAt.After(latest) {
				t.Fatalf("another intent waiting for the paused budget: %s; want a snooze of at most the max pause, %s", show(res, err), DefaultMaxPause)
			}
			if n := len(h.fake.Requests()); n != 1 {
				t.Fatalf("%d requests, want the one that met the 429", n)
			}

			// The pause cleared by hand (as the README says) and the limit
			// lifted: each job sends when it next runs.
			pgtest.Exec(t, h.pool, `UPDATE sendonce_rate_budget SET paused_until = 'epoch', probe_until = 'epoch'`)
			h.fake.SetFaults()
			for _, key := range []string{"k:first", "k:second"} {
				if res, err := h.work(key, 1); err != nil || !completed(res) {
					t.Fatalf("%s after the pause was cleared: %s", key, show(res, err))
				}
				if rec := h.get(key); rec.State != outbox.StateSent {
					t.Fatalf("%s: %+v, want sent", key, rec)
				}
			}
		})
	}
}

// A 429 never parks an intent for the 429's sake: an attempted intent ends
// only when its replay window would end before the fleet sends again, and
// then its reason is the replay window's.
func TestRateLimitEndsOnlyWithTheReplayWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{ReplayWindow: time.Minute},
		fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: yearRetryAfter}).withBudget()
	h.enqueue(outbox.Intent{Key: "k:window", Payload: emailBody("ada@example.com")})
	if res, err := h.work("k:window", 1); err != nil || !cancelled(res) {
		t.Fatalf("%s, want cancelled: the max pause outlasts the 1m window", show(res, err))
	}
	rec := h.get("k:window")
	if rec.State != outbox.StateFailed || !strings.HasPrefix(rec.LastError, "replay window") {
		t.Fatalf("state %s, reason %q: want failed with the replay window's reason, not the 429's", rec.State, rec.LastError)
	}
	if got := fmt.Sprint(h.results()); got != "[budget_token rate_limited expired]" {
		t.Fatalf("outcomes %s, want [budget_token rate_limited expired]", got)
	}
}
