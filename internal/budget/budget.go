// Package budget paces the sends of every worker that uses one API key to
// the provider's rate limit, as one fleet. The state is a token bucket in
// PostgreSQL (table sendonce_rate_budget, a row per API key fingerprint);
// each worker leases a few tokens at a time for the sends waiting in it, so
// the row is touched a few times a second, not once per send. A send waits
// for its token before it claims its intent, so waiting is not an attempt.
//
// With a configured rate (--api-rate) the bucket refills at that rate: the
// most generous rate configured on a worker that leased in the last
// minute. A worker configured lower paces its own sends at its own rate
// (a limiter in memory) and never lowers the rate the others lease from.
// A 429 lowers the fleet's rate (multiplicative decrease, once a second at
// most) and pauses it for a Retry-After, for MaxPause at most: past it the
// fleet probes with single requests until the API serves one or the asked
// wait is over. The rate grows back while there is demand (additive
// increase). With no configured rate the fleet sends unlimited until the
// first 429 and then finds the limit the same way.
package budget

import (
	"context"
	"log/slog"
	"math"
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

// DefaultMaxPause is Config.MaxPause when none is given: five minutes. A
// rate limit's window is a second, a minute, at most an hour; a fleet that
// comes back after five minutes has honoured any usual Retry-After, and
// when the API asked for longer (or a pause was cleared by hand) it costs a
// probe every five minutes, and at most five minutes of sending lost, not
// a year of it. It fits 276 times in the 23-hour replay window.
const DefaultMaxPause = 5 * time.Minute

// Config configures a Budget.
type Config struct {
	// Rate is this worker's configured limit in requests per second, or 0
	// to find it from 429s. It caps this worker's own sends; the fleet's
	// rate is the most generous configured on a worker that leased in the
	// last minute.
	Rate float64
	// MaxPause bounds how long a Retry-After pauses the fleet (default
	// DefaultMaxPause). Past it the fleet sends single requests, probes,
	// until the API serves one or the asked wait is over; no Wait tells its
	// caller to come back later than MaxPause.
	MaxPause time.Duration
	// Logger receives the budget's few lines (a 429, a mismatch of rates).
	Logger *slog.Logger
	// Quotas are this worker's quotas (per day, per month), counted for
	// the fleet in the database (see quota.go): a rate paces, a quota
	// counts.
	Quotas []Quota
	// QuotaZone is the zone of the quotas' calendar days and months
	// (default UTC).
	QuotaZone *time.Location
	// Now, when set (by tests), is the clock quotas are counted by; nil:
	// the database's.
	Now func() time.Time
}

// Budget is one worker's side of the fleet's budget for one API key.
type Budget struct {
	store    store
	ceiling  float64 // this worker's configured rate, requests per second; 0: find the limit from 429s
	maxPause time.Duration
	logger   *slog.Logger

	mu             sync.Mutex
	own            pace // this worker's sends at its own configured rate
	tokens         int
	leasedAt       time.Time
	unlimitedUntil time.Time
	rate           float64
	probing        bool          // the last lease found the fleet probing
	mismatchLogged bool          // a fleet's rate other than this worker's was logged
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
	maxPause := cfg.MaxPause
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	zone := cfg.QuotaZone
	if zone == nil {
		zone = time.UTC
	}
	q := &quotas{configured: cfg.Quotas, zone: zone, now: cfg.Now, logger: logger}
	return &Budget{store: store{pool: pool, fp: keyFingerprint, quota: q}, ceiling: cfg.Rate, maxPause: maxPause, logger: logger,
		own: newPace(cfg.Rate, time.Now())}
}

// Wait takes a token for one send, waiting at most max for it. When none
// comes in time it returns ok false and how long the fleet expects the
// next one to take, at most MaxPause, so the caller can give its slot back
// and come again.
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
		// This worker's own rate first: a worker configured below the
		// fleet waits here, without touching the fleet's row.
		if d := b.own.wait(now); d > 0 {
			if now.Add(d).After(deadline) {
				return false, b.capped(d), nil
			}
			b.mu.Unlock()
			err := sleep(ctx, nil, d)
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
			return false, b.capped(wait), err
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
	if b.tokens > 0 {
		// Expired unspent: off the quota's count again.
		b.store.quota.refund.Add(int64(b.tokens))
		b.tokens = 0
	}
	for {
		want := max(1, min(b.waiting, int(b.rate*leaseShare.Seconds()), b.own.available(time.Now())))
		b.mu.Unlock()
		granted, next, bk, err := b.store.lease(ctx, want, b.ceiling, b.maxPause)
		b.mu.Lock()
		if err != nil {
			return 0, err
		}
		now := time.Now()
		b.rate, b.probing = bk.rate, bk.probeFor > 0 && bk.pausedFor == 0
		b.checkCeiling(bk.ceiling)
		if bk.rate == 0 && !b.store.quota.counting.Load() {
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

// checkCeiling logs, once, that the fleet leases at a rate other than the
// one configured on this worker: the operator gave the workers of one key
// different --api-rate values. Nothing else changes: this worker paces its
// own sends at its own rate, and the fleet's is the most generous.
func (b *Budget) checkCeiling(fleet float64) {
	if b.mismatchLogged || math.Abs(fleet-b.ceiling) <= 1e-9*math.Max(fleet, b.ceiling) {
		return
	}
	b.mismatchLogged = true
	b.logger.Warn("budget: this worker's configured rate differs from the fleet's; it paces its own sends at its own rate and leaves the fleet's alone (give every worker of a key the same rate)",
		"worker_rate", b.ceiling, "fleet_rate", fleet)
}

// Throttle tells the fleet the API answered 429: the rate is lowered (or,
// when none was known, set from this worker's observed rate), the fleet
// pauses for retryAfter (at most MaxPause; it probes for the rest), and
// this worker's leased tokens are dropped.
func (b *Budget) Throttle(ctx context.Context, retryAfter time.Duration) error {
	if b.store.quota.quotaHit.Swap(false) {
		// The 429 was the quota's (Answered paused the fleet until it
		// resets): no evidence about the rate, which stays.
		return nil
	}
	b.mu.Lock()
	b.store.quota.refund.Add(int64(b.tokens))
	b.tokens, b.unlimitedUntil = 0, time.Time{}
	observed := b.observed(time.Now())
	b.mu.Unlock()
	bk, err := b.store.throttle(ctx, retryAfter, observed, b.maxPause)
	if err != nil {
		return err
	}
	if retryAfter > b.maxPause {
		b.logger.Warn("budget: the API answered 429 asking for a wait longer than the max pause; the fleet pauses for the max pause, then probes with single requests",
			"rate", round(bk.rate), "retry_after", retryAfter, "paused_for", bk.pausedFor, "probing_for", bk.probeFor-bk.pausedFor)
		return nil
	}
	b.logger.Info("budget: the API answered 429; the fleet slows down", "rate", round(bk.rate), "paused_for", bk.pausedFor)
	return nil
}

// Served tells the fleet the API answered a send with something other
// than a 429 (a success, or a refusal of the request itself): when the
// fleet was probing after a long Retry-After, the probe is over and the
// fleet goes back to its rate. It costs nothing when the fleet was not
// probing as of this worker's last lease.
func (b *Budget) Served(ctx context.Context) error {
	b.mu.Lock()
	probing := b.probing
	b.probing = false
	b.mu.Unlock()
	if !probing {
		return nil
	}
	if err := b.store.endProbe(ctx); err != nil {
		return err
	}
	b.logger.Info("budget: the API served a probe; the fleet sends at its rate again")
	return nil
}

func (b *Budget) took(now time.Time) {
	b.own.take()
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
	return b.capped(time.Duration(float64(b.waiting) / b.rate * float64(time.Second)))
}

// capped bounds a wait a caller is told of to MaxPause: a job waiting for
// the budget re-checks at least that often, so no Retry-After, queue or
// misconfigured rate schedules it further out.
func (b *Budget) capped(d time.Duration) time.Duration { return min(d, b.maxPause) }

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
