package budget

import (
	"context"
	"sync"
	"time"
)

// Answer is what the API said to one request, as far as the budget cares:
// the status, whether it says a quota is exhausted, and its rate-limit
// headers (RateLimit-*, the IETF draft's RateLimit and RateLimit-Policy,
// X-RateLimit-*), which let the fleet pace before a 429 rather than after.
type Answer struct {
	// Status is the HTTP status; 0 when no answer came (a network error).
	Status int
	// Quota is the quota the answer says is exhausted (a 429 whose body
	// names the daily or monthly quota, or a day-long policy with nothing
	// remaining); "" when none.
	Quota Period
	// QuotaReset is how long until that quota resets, when the answer
	// says (Retry-After, RateLimit-Reset); 0: at the period's end.
	QuotaReset time.Duration
	// Limit and Window are the API's limit: Limit requests per Window (a
	// RateLimit-Policy, or RateLimit-Limit's ";w="); zero when not sent.
	Limit  int64
	Window time.Duration
	// Remaining and Reset are what is left of the limit and when it is
	// whole again; HasRemaining says Remaining was sent.
	Remaining    int64
	HasRemaining bool
	Reset        time.Duration
}

// apiRateTTL is how long a rate read from the API's headers caps the
// fleet after it was last seen.
const apiRateTTL = time.Minute

// headerPauseEvery bounds how often one worker pauses the fleet for a
// RateLimit-Remaining of 0 (a write of the budget's row).
const headerPauseEvery = 100 * time.Millisecond

// apiRate is the rate the API's headers state (Limit per Window), which
// caps this worker's leases: the fleet's rate never exceeds what the API
// says it allows, whatever the rate configured or found from 429s.
type apiRate struct {
	mu     sync.Mutex
	rate   float64
	seen   time.Time
	paused time.Time // when this worker last paused the fleet for Remaining 0
}

func (a *apiRate) set(rate float64, now time.Time) {
	a.mu.Lock()
	a.rate, a.seen = rate, now
	a.mu.Unlock()
}

func (a *apiRate) get(now time.Time) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.seen) > apiRateTTL {
		return 0
	}
	return a.rate
}

// cap lowers the bucket's rate (and its saved tokens) to the API's.
func (a *apiRate) cap(b *bucket, now time.Time) {
	r := a.get(now)
	if r <= 0 {
		return
	}
	if b.rate == 0 || b.rate > r {
		b.rate = r
	}
	b.tokens = min(b.tokens, max(1, r))
}

// Answered tells the budget what the API answered a request (the worker
// calls it after every send): a quota the answer says is exhausted pauses
// the fleet until it resets (one probe a minute, and the 429 does not cut
// the rate); a rate-limit 429 gives its quota count back; a served probe
// ends a quota's exhaustion; and the rate headers pace the fleet: the
// API's stated rate caps it, and nothing remaining drops this worker's
// tokens (or, with no rate stated, pauses the fleet until the Reset).
func (b *Budget) Answered(ctx context.Context, a Answer) error {
	now := time.Now()
	q := b.store.quota
	if a.Quota != "" {
		b.dropTokens()
		until, err := q.exhausted(ctx, &b.store, a.Quota, a.QuotaReset)
		if err != nil {
			return err
		}
		b.logger.Warn("budget: the API says the quota is exhausted; the fleet pauses until it resets, with one probe a minute",
			"quota", string(a.Quota), "exhausted_until", until.UTC().Format(time.RFC3339))
		return nil
	}
	switch {
	case a.Status == 429:
		if q.counting.Load() {
			q.refund.Add(1) // refused: the API did not count it
		}
	case a.Status != 0 && a.Status < 500 && q.probe.Swap(false):
		if err := q.probeServed(ctx, &b.store); err != nil {
			return err
		}
		b.logger.Info("budget: the API served a probe of an exhausted quota; the fleet sends again")
	}
	if a.Limit > 0 && a.Window > 0 && a.Window < 24*time.Hour {
		b.store.apiRate.set(float64(a.Limit)/a.Window.Seconds(), now)
	}
	if !a.HasRemaining || a.Remaining > 0 {
		return nil
	}
	if b.store.apiRate.get(now) > 0 || a.Reset <= 0 {
		// The rate is known: the fleet paces at it; this worker's tokens,
		// leased before the API ran out, would each meet a 429.
		b.dropTokens()
		return nil
	}
	b.store.apiRate.mu.Lock()
	skip := now.Sub(b.store.apiRate.paused) < headerPauseEvery
	if !skip {
		b.store.apiRate.paused = now
	}
	b.store.apiRate.mu.Unlock()
	if skip {
		return nil
	}
	b.dropTokens()
	pause := min(a.Reset, b.maxPause)
	_, err := b.store.change(ctx, func(bk *bucket) bool {
		if bk.rate == 0 && a.Limit > 0 {
			// Unlimited so far: Limit per Reset is the best guess of the rate.
			bk.rate = float64(a.Limit) / max(a.Reset.Seconds(), 1)
		}
		bk.pausedFor = max(bk.pausedFor, pause)
		bk.tokens = min(bk.tokens, 0)
		return false
	})
	return err
}
