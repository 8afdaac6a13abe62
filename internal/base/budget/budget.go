// Package budget paces the sends of every worker that uses one API key to
// the provider's rate limit, as one fleet. The state is a token bucket in
// PostgreSQL (table sendonce_rate_budget, a row per API key fingerprint);
// each worker leases a few tokens at a time for the sends waiting in it, so
// the row is touched a few times a second, not once per send. A send waits
// for its token before it claims its intent, so waiting is not an attempt.
// A lease that finds the bucket empty takes the next tokens due (within a
// tenth of a second) and the worker sleeps until they are due, without
// reading the row again.
//
// With a configured rate (--api-rate) the bucket refills at that rate: the
// most generous rate configured on a worker that leased in the last
// minute. A worker configured lower paces its own sends at its own rate
// (a limiter in memory) and never lowers the rate the others lease from.
// With none the fleet starts slow, at 10 requests a second, and doubles
// its rate with use (slow start) until the API's first fleet signal.
//
// A 429 lowers the fleet's rate only when it is a fleet signal (see
// fleetSignal): the 429s of intents that had not met one before are at
// least 1% of the fleet's recent requests. Then the rate is
// cut (multiplicative decrease, once a second at most, or again at once
// when a request leased after the cut is refused), and a Retry-After
// pauses the fleet for MaxPause at most: past it the fleet probes with
// single requests until the API serves one or the asked wait is over. The
// rate grows back while there is demand (additive increase). A 429 that is
// not a fleet signal is the intent's own trouble: the worker backs that
// intent off on its own, and the fleet sends on.
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
	// worker holds (and loses, should it die) are a sliver of the budget;
	// leaseShareKnown where the rate is known, configured or found from
	// 429s (see reserveAheadKnown), and never more than the sends waiting.
	leaseShare      = 100 * time.Millisecond
	leaseShareKnown = reserveAheadKnown
	// tokenTTL drops leased tokens no send took in time: they would
	// otherwise be spent later as a burst.
	tokenTTL = time.Second
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

	closed    chan struct{} // closed by Close: every wait returns at once
	closeOnce sync.Once

	mu             sync.Mutex
	own            pace // this worker's sends at its own configured rate
	tokens         int
	leasedAt       time.Time     // when the lease of tokens began
	readyAt        time.Time     // when the next token is due
	every          time.Duration // between two tokens of one lease: the rate's spacing
	rate           float64
	probing        bool          // the last lease found the fleet probing
	known          bool          // the last lease found the fleet's rate known (bucket.known); before one, a rate is configured
	mismatchLogged bool          // a fleet's rate other than this worker's was logged
	leasing        chan struct{} // closed when the lease in flight is done
	turns          turns         // of the sends napping for tokens leased ahead (see wait)
	urgentTurns    turns         // the same of the sends that are not bulk, which bulk ones step aside for
	waiting        int
	urgent         int // waiting sends that are not bulk (WaitBulk yields to them)
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
	q.counting.Store(len(cfg.Quotas) > 0)
	return &Budget{store: store{pool: pool, fp: keyFingerprint, quota: q}, ceiling: cfg.Rate, maxPause: maxPause, logger: logger,
		own: newPace(cfg.Rate, time.Now()), known: cfg.Rate > 0, closed: make(chan struct{})}
}

// Close ends every wait for a token, at once and from now on: they return
// no token (ok false) and the expected wait, so that a worker that stops
// gives its waiting sends back without an attempt, however many wait
// (issue 23: a stop is prompt). A Budget is not used again after Close.
func (b *Budget) Close() { b.closeOnce.Do(func() { close(b.closed) }) }

// isClosed reports whether Close was called.
func (b *Budget) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// Wait takes a token for one send, waiting at most max for it. When none
// comes in time (or the Budget is closed) it returns ok false and how long
// the fleet expects the next one to take, at most MaxPause, so the caller
// can give its slot back and come again.
func (b *Budget) Wait(ctx context.Context, max time.Duration) (ok bool, retryIn time.Duration, err error) {
	t, err := b.Acquire(ctx, max, false)
	return t.OK, t.RetryIn, err
}

// WaitBulk is Wait for a send of a run (a campaign, a billing run): it
// takes a token only when no other send of this worker is waiting for
// one, so a lone transactional email never queues behind a campaign.
func (b *Budget) WaitBulk(ctx context.Context, max time.Duration) (ok bool, retryIn time.Duration, err error) {
	t, err := b.Acquire(ctx, max, true)
	return t.OK, t.RetryIn, err
}

// Token is what Acquire answers.
type Token struct {
	// OK is set when the send has its token.
	OK bool
	// RetryIn, when not OK, is when the fleet expects a token, at most
	// MaxPause.
	RetryIn time.Duration
	// LeasedAt is when the token's lease began (by this process's
	// clock): Refused tells a 429 of a request sent at a rate the fleet
	// has cut since from one at the cut rate.
	LeasedAt time.Time
}

// Acquire is Wait (bulk: WaitBulk) that also says when the token was
// leased.
func (b *Budget) Acquire(ctx context.Context, max time.Duration, bulk bool) (Token, error) {
	return b.wait(ctx, max, bulk)
}

// bulkYield is how long a bulk send steps aside for another.
const bulkYield = 5 * time.Millisecond

// reserveHorizon is how far ahead a send takes a leased token, then
// sleeps until the token's time. Every send waiting for a token used to
// sleep until the next one was due, and all but one of them woke to sleep
// again: with 500 sends in flight, the wakeups of each token cost the drain
// 78 µs of CPU per intent (1.6 s of a 9.5 s drain of 20,000). Now a send
// wakes once per horizon at most, and takes the tokens due within it. A
// token so taken is sent even if a 429 drops the lease's other tokens
// meanwhile (at most a horizon's worth), and an urgent send may wait
// behind a horizon's worth taken by bulk sends.
const reserveHorizon = 20 * time.Millisecond

// wait is Acquire's loop. It is long because its steps must run in this
// order under one lock: give way to urgent sends, this worker's own rate,
// tokens already leased (due now or later), another send's lease in
// flight, and only then a lease of its own; each sleep (nap) drops the
// lock.
func (b *Budget) wait(ctx context.Context, max time.Duration, bulk bool) (Token, error) {
	deadline := time.Now().Add(max)
	// ticket is this send's turn at tokens leased ahead, once it naps for
	// one (-1: none): the sends napping wake one after another, each near
	// its own token, not all of them at the next one's (with 500 sends
	// waiting, every token woke every napping send: about five wakes of
	// each send per token, the drain's largest cost after the client's).
	// An urgent send counts only the urgent turns ahead of it: the bulk
	// sends before it step aside for it (WaitBulk) and take none of the
	// tokens it waits for.
	ticket := int64(-1)
	mine := &b.turns
	if !bulk {
		mine = &b.urgentTurns
	}
	b.mu.Lock()
	b.waiting++
	if !bulk {
		b.urgent++
	}
	defer func() {
		if ticket >= 0 {
			b.gaveUp(mine) // the turns after it move up
		}
		b.waiting--
		if !bulk {
			b.urgent--
		}
		b.mu.Unlock()
	}()
	// nap sleeps for d (at most until the deadline), ch closing, Close or
	// ctx ending, without the lock; it reports whether to give up.
	nap := func(d time.Duration, ch chan struct{}) (Token, bool, error) {
		b.mu.Unlock()
		err := sleep(ctx, ch, b.closed, min(d, time.Until(deadline)))
		b.mu.Lock()
		switch {
		case err != nil:
			return Token{}, true, err
		case b.isClosed() || time.Now().After(deadline):
			return Token{RetryIn: b.expectedWait()}, true, nil
		}
		return Token{}, false, nil
	}
	for {
		now := time.Now()
		if b.isClosed() {
			return Token{RetryIn: b.expectedWait()}, nil
		}
		if bulk && b.urgent > 0 {
			if now.After(deadline) {
				return Token{RetryIn: b.expectedWait()}, nil
			}
			if t, stop, err := nap(bulkYield, nil); stop {
				return t, err
			}
			continue
		}
		// This worker's own rate first: a worker configured below the
		// fleet waits here, without touching the fleet's row.
		if d := b.own.wait(now); d > 0 {
			if now.Add(d).After(deadline) {
				return Token{RetryIn: b.capped(d)}, nil
			}
			if t, stop, err := nap(d, nil); stop {
				return t, err
			}
			continue
		}
		if b.tokens > 0 && now.Sub(b.readyAt) < tokenTTL {
			d := b.readyAt.Sub(now)
			if d > 0 && b.readyAt.After(deadline) {
				return Token{RetryIn: b.capped(d)}, nil
			}
			if d > reserveHorizon {
				// Leased ahead: sleep until this send's turn (its
				// ticket) nears, the sends ahead of it one token each, up
				// to the lease's last.
				if ticket < 0 {
					ticket = mine.take()
					if mine != &b.turns {
						b.turns.take()
					}
				}
				ahead := min(ticket-mine.served, int64(b.tokens-1))
				if ahead < 0 {
					ahead = 0
				}
				if t, stop, err := nap(d+time.Duration(ahead)*b.every-reserveHorizon, nil); stop {
					return t, err
				}
				continue
			}
			// Due now or within the horizon: this send takes it, and
			// waits for its own token's time.
			b.tokens--
			b.turns.served++
			if !bulk {
				b.urgentTurns.served++
			}
			ticket = -1
			leasedAt := b.leasedAt
			b.readyAt = b.readyAt.Add(b.every) // the lease's next token
			b.own.take()
			if d > 0 {
				b.mu.Unlock()
				err := sleep(ctx, nil, b.closed, d)
				b.mu.Lock()
				if err != nil {
					return Token{}, err
				}
				if b.isClosed() {
					return Token{RetryIn: b.expectedWait()}, nil
				}
			}
			return Token{OK: true, LeasedAt: leasedAt}, nil
		}
		if ch := b.leasing; ch != nil {
			if t, stop, err := nap(time.Until(deadline), ch); stop {
				return t, err
			}
			continue
		}
		wait, err := b.lease(ctx, deadline)
		if err != nil || wait > 0 {
			return Token{RetryIn: b.capped(wait)}, err
		}
	}
}

// turns are the turns at tokens leased ahead of sends napping for them:
// a ticket is a send's turn; tickets-served are the turns ahead of a new
// one.
type turns struct {
	tickets int64 // turns given out
	served  int64 // tokens taken, and turns given up, since the first
}

// take gives out the next turn.
func (t *turns) take() int64 {
	t.tickets++
	return t.tickets - 1
}

// gaveUp counts a turn given up by a send of mine (b.turns or
// b.urgentTurns), in b.turns too.
func (b *Budget) gaveUp(mine *turns) {
	mine.served++
	if mine != &b.turns {
		b.turns.served++
	}
}

// lease leases tokens for the waiting sends, called with mu held; it keeps
// the lease to itself (others wait on leasing) until it has some (due now
// or soon: readyAt), ctx ends, the Budget is closed, or the deadline
// passes (then it returns the expected wait).
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
		start := time.Now()
		share := leaseShare
		if b.known {
			share = leaseShareKnown
		}
		want := max(1, min(b.waiting, int(b.rate*share.Seconds()), b.own.available(start)))
		b.mu.Unlock()
		granted, next, bk, err := b.store.lease(ctx, want, b.ceiling, b.maxPause)
		b.mu.Lock()
		if err != nil {
			return 0, err
		}
		now := time.Now()
		b.rate, b.probing, b.known = bk.rate, bk.probeFor > 0 && bk.pausedFor == 0, bk.known()
		b.checkCeiling(bk.ceiling)
		if granted > 0 {
			// next is when the last token is due; the others go before
			// it, at the rate's spacing, not as one burst at the end.
			b.every = 0
			if b.rate > 0 {
				b.every = time.Duration(float64(time.Second) / b.rate)
			}
			first := now.Add(max(0, next-time.Duration(granted-1)*b.every))
			if b.tokens > 0 {
				// Given back (Return) while the lease was in flight, and
				// replaced by its tokens: off the quota's count again.
				b.store.quota.refund.Add(int64(b.tokens))
			}
			b.tokens, b.leasedAt, b.readyAt = granted, start, first
			return 0, nil
		}
		if now.Add(next).After(deadline) {
			return next, nil
		}
		b.mu.Unlock()
		err = sleep(ctx, nil, b.closed, next)
		b.mu.Lock()
		if err != nil {
			return 0, err
		}
		if b.isClosed() {
			return b.expectedWait(), nil
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

// Throttle tells the fleet the API answered 429 in a way that concerns
// the whole fleet (a Refused that was a fleet signal, or an answer that
// says so itself): the rate is lowered, the fleet pauses for retryAfter
// (at most MaxPause; it probes for the rest), and this worker's leased
// tokens are dropped. A quota's 429 (an Answer with a Quota) is not
// Throttle's: Answered has paused the fleet until the quota resets, and
// the rate stays.
func (b *Budget) Throttle(ctx context.Context, retryAfter time.Duration) error {
	b.dropTokens()
	bk, err := b.store.throttle(ctx, retryAfter, b.maxPause)
	if err != nil {
		return err
	}
	b.logThrottle(bk, retryAfter)
	return nil
}

// Refused tells the fleet the API answered 429 to a request of an intent
// that had not met one before (an intent that had backs off on its own;
// the fleet is not told). leasedAt is the request's Token.LeasedAt (zero:
// unknown). When the fleet's recent 429s make it a fleet signal, Refused
// does what Throttle does and reports fleet true; the send then waits for
// the budget. Otherwise the 429 is the intent's own trouble: nothing
// changes for the fleet, and retryAfter is for the caller to honour for
// that intent alone. A quota's 429 (an Answer with a Quota) is not
// Refused's either: the caller waits for the budget, which Answered has
// paused until the quota resets.
func (b *Budget) Refused(ctx context.Context, retryAfter time.Duration, leasedAt time.Time) (fleet bool, err error) {
	age := time.Duration(-1)
	if !leasedAt.IsZero() {
		age = time.Since(leasedAt)
	}
	signal, bk, err := b.store.refused(ctx, retryAfter, age, b.maxPause)
	if err != nil || !signal {
		return false, err
	}
	b.dropTokens()
	b.logThrottle(bk, retryAfter)
	return true, nil
}

// dropTokens drops this worker's leased tokens, off the quotas' count.
func (b *Budget) dropTokens() {
	b.mu.Lock()
	if b.tokens > 0 {
		b.store.quota.refund.Add(int64(b.tokens))
	}
	b.tokens = 0
	b.mu.Unlock()
}

func (b *Budget) logThrottle(bk bucket, retryAfter time.Duration) {
	if retryAfter > b.maxPause {
		b.logger.Warn("budget: the API answered 429 asking for a wait longer than the max pause; the fleet pauses for the max pause, then probes with single requests",
			"rate", round(bk.rate), "retry_after", retryAfter, "paused_for", bk.pausedFor, "probing_for", bk.probeFor-bk.pausedFor)
		return
	}
	b.logger.Info("budget: the API answered 429; the fleet slows down", "rate", round(bk.rate), "paused_for", bk.pausedFor)
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

// sleep waits for d, ch or stop closing, or ctx ending (its error).
func sleep(ctx context.Context, ch, stop chan struct{}, d time.Duration) error {
	if d <= 0 {
		d = time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-stop:
	case <-t.C:
	}
	return nil
}

func round(f float64) float64 { return float64(int(f*100)) / 100 }
