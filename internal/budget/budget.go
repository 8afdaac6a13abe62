// Package budget paces the sends of every worker that uses one API key to
// the provider's rate limit, as one fleet. The state is a token bucket in
// PostgreSQL (table sendonce_rate_budget, a row per API key fingerprint);
// each worker leases a few tokens at a time for the sends waiting in it, so
// the row is touched a few times a second, not once per send. A send waits
// for its token before it claims its intent, so waiting is not an attempt.
//
// With a configured rate (--api-rate) the bucket refills at that rate. A
// 429 lowers the fleet's rate (multiplicative decrease, once a second at
// most) and pauses it for a Retry-After; the rate grows back while there is
// demand (additive increase). With no configured rate the fleet sends
// unlimited until the first 429 and then finds the limit the same way.
package budget

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// leaseShare bounds a lease to this much of the rate, so tokens a
	// worker holds (and loses, should it die) are a sliver of the budget.
	leaseShare = 100 * time.Millisecond
	// tokenTTL drops leased tokens no send took in time: they would
	// otherwise be spent later as a burst.
	tokenTTL = time.Second
	// recheck is how long an unlimited worker goes without asking whether
	// the fleet has met a limit (a 429 of its own asks at once).
	recheck = time.Second
)

// DefaultMaxPause is Config.MaxPause when none is given.
const DefaultMaxPause = 5 * time.Minute

// Config configures a Budget.
type Config struct {
	// Rate is this worker's configured limit in requests per second, or 0
	// to find it from 429s.
	Rate float64
	// MaxPause bounds how long a Retry-After pauses the fleet (default
	// DefaultMaxPause).
	MaxPause time.Duration
	// Logger receives the budget's few lines (a 429, a mismatch).
	Logger *slog.Logger
}

// Budget is one worker's side of the fleet's budget for one API key.
type Budget struct {
	store   store
	ceiling float64 // requests per second; 0: find the limit from 429s
	logger  *slog.Logger

	mu             sync.Mutex
	tokens         int
	leasedAt       time.Time
	unlimitedUntil time.Time
	rate           float64
	leasing        chan struct{} // closed when the lease in flight is done
	waiting        int
	urgent         int         // waiting sends that are not bulk (WaitBulk yields to them)
	taken          []time.Time // recent takes, for the observed rate
}

// New returns the budget of the API key with the given fingerprint.
func New(pool *pgxpool.Pool, keyFingerprint string, cfg Config) *Budget {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Budget{store: store{pool: pool, fp: keyFingerprint}, ceiling: cfg.Rate, logger: logger}
}

// Served tells the fleet the API answered a send with something other
// than a 429.
func (b *Budget) Served(ctx context.Context) error { return nil }

// Wait takes a token for one send, waiting at most max for it. When none
// comes in time it returns ok false and how long the fleet expects the
// next one to take, so the caller can give its slot back and come again.
func (b *Budget) Wait(ctx context.Context, max time.Duration) (ok bool, retryIn time.Duration, err error) {
	return b.wait(ctx, max, false)
}

// WaitBulk is Wait for a send of a run (a campaign, a billing run): it
// takes a token only when no other send of this worker is waiting for
// one, so a lone transactional email never queues behind a campaign.
func (b *Budget) WaitBulk(ctx context.Context, max time.Duration) (ok bool, retryIn time.Duration, err error) {
	return b.wait(ctx, max, true)
}

// bulkYield is how long a bulk send steps aside for another.
const bulkYield = 5 * time.Millisecond

func (b *Budget) wait(ctx context.Context, max time.Duration, bulk bool) (ok bool, retryIn time.Duration, err error) {
	deadline := time.Now().Add(max)
	b.mu.Lock()
	b.waiting++
	if !bulk {
		b.urgent++
	}
	defer func() {
		b.waiting--
		if !bulk {
			b.urgent--
		}
		b.mu.Unlock()
	}()
	for {
		now := time.Now()
		if bulk && b.urgent > 0 {
			if now.After(deadline) {
				return false, b.expectedWait(), nil
			}
			b.mu.Unlock()
			err := sleep(ctx, nil, bulkYield)
			b.mu.Lock()
			if err != nil {
				return false, 0, err
			}
			continue
		}
		if b.tokens > 0 && now.Sub(b.leasedAt) < tokenTTL {
			b.tokens--
			b.took(now)
			return true, 0, nil
		}
		if now.Before(b.unlimitedUntil) {
			b.took(now)
			return true, 0, nil
		}
		if ch := b.leasing; ch != nil {
			b.mu.Unlock()
			err := sleep(ctx, ch, time.Until(deadline))
			b.mu.Lock()
			if err != nil {
				return false, 0, err
			}
			if time.Now().After(deadline) {
				return false, b.expectedWait(), nil
			}
			continue
		}
		wait, err := b.lease(ctx, deadline)
		if err != nil || wait > 0 {
			return false, wait, err
		}
	}
}

// lease leases tokens for the waiting sends, called with mu held; it keeps
// the lease to itself (others wait on leasing) until it has some, ctx ends,
// or the deadline passes (then it returns the expected wait).
func (b *Budget) lease(ctx context.Context, deadline time.Time) (wait time.Duration, err error) {
	ch := make(chan struct{})
	b.leasing = ch
	defer func() { b.leasing = nil; close(ch) }()
	for {
		want := max(1, min(b.waiting, int(b.rate*leaseShare.Seconds())))
		b.mu.Unlock()
		granted, next, rate, err := b.store.lease(ctx, want, b.ceiling)
		b.mu.Lock()
		if err != nil {
			return 0, err
		}
		now := time.Now()
		b.rate = rate
		if rate == 0 {
			b.unlimitedUntil = now.Add(recheck)
			return 0, nil
		}
		if granted > 0 {
			b.tokens, b.leasedAt = granted, now
			return 0, nil
		}
		if now.Add(next).After(deadline) {
			return next, nil
		}
		b.mu.Unlock()
		err = sleep(ctx, nil, next)
		b.mu.Lock()
		if err != nil {
			return 0, err
		}
	}
}

// Throttle tells the fleet the API answered 429: the rate is lowered (or,
// when none was known, set from this worker's observed rate), the fleet
// pauses for retryAfter, and this worker's leased tokens are dropped.
func (b *Budget) Throttle(ctx context.Context, retryAfter time.Duration) error {
	b.mu.Lock()
	b.tokens, b.unlimitedUntil = 0, time.Time{}
	observed := b.observed(time.Now())
	b.mu.Unlock()
	bk, err := b.store.throttle(ctx, retryAfter, observed)
	if err != nil {
		return err
	}
	b.logger.Info("budget: the API answered 429; the fleet slows down", "rate", round(bk.rate), "paused_for", bk.pausedFor)
	return nil
}

func (b *Budget) took(now time.Time) {
	if len(b.taken) >= 4096 {
		b.taken = b.taken[len(b.taken)/2:]
	}
	b.taken = append(b.taken, now)
}

// observed is this worker's sends in the last second.
func (b *Budget) observed(now time.Time) float64 {
	n := 0
	for i := len(b.taken) - 1; i >= 0 && now.Sub(b.taken[i]) < time.Second; i-- {
		n++
	}
	return float64(n)
}

func (b *Budget) expectedWait() time.Duration {
	if b.rate <= 0 {
		return 0
	}
	return time.Duration(float64(b.waiting) / b.rate * float64(time.Second))
}

// sleep waits for d, ch closing, or ctx ending (its error).
func sleep(ctx context.Context, ch chan struct{}, d time.Duration) error {
	if d <= 0 {
		d = time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-t.C:
	}
	return nil
}

func round(f float64) float64 { return float64(int(f*100)) / 100 }
