package worker

import (
	"context"
	"sync"
	"time"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// A worker paced by the fleet's budget holds a few tokens leased at a
// time, which its slots waiting for a token take one after another at the
// lease's spacing. Each of them used to claim its intent alone, one
// statement and one commit (a WAL flush) per intent: in the rate-limited
// benchmark (3 workers at 20/s), the claim was the largest part of the
// database's CPU per intent. So a slot that gets a token claims, in the
// same statement as its own intent, one for each token the budget holds
// leased for the slots waiting (Budget.Leased; at most aheadMax), and
// leaves them here: the next slots to get a token take them instead of
// claiming. Each is sent by the slot that takes it, with that slot's token,
// so the sends go out in parallel at the budget's pace, as the claims of
// one at a time did (a slot sending its claims one after another made a
// killed worker's sends replay late: 6 s instead of 3).
//
// An intent left here is sending under the worker's claim, not yet
// attempted. One no slot takes within aheadTTL (the budget stopped
// granting: a 429 paused the fleet, the quota ran out) and those left when
// the drain stops are given back as they were (sendstate.UnclaimDrained);
// should the worker die with them, the fleet's sweeper rescues them with
// its other claims once its lease has ended.
type ahead struct {
	mu     sync.Mutex
	claims []aheadClaim
}

type aheadClaim struct {
	c  *sendstate.DrainClaim
	at time.Time
}

// aheadMax bounds the intents a slot claims ahead for the others.
const aheadMax = 7

// aheadTTL is how long an intent claimed ahead waits for a slot to take
// it: longer than a lease's tokens take to be spent (the budget drops
// tokens a second old).
const aheadTTL = 2 * time.Second

// claim takes a due intent for a slot: with a token of the budget, one
// claimed ahead for it if there is one; otherwise a new claim, with one
// intent ahead for each slot about to get a token. Nil when none is due.
func (d *drain) claim(ctx context.Context, token bool) (*sendstate.DrainClaim, error) {
	if token {
		if c := d.takeAhead(); c != nil {
			return c, nil
		}
	}
	cs, err := d.w.batch.claimDues(ctx, 1+d.aheadFor(token))
	if len(cs) == 0 {
		if token && err == nil {
			// Nothing more due, but another slot's claim may have left
			// some ahead meanwhile.
			return d.takeAhead(), nil
		}
		return nil, err
	}
	if len(cs) > 1 {
		d.putAhead(cs[1:])
	}
	return cs[0], err
}

// slowGap is the time between a worker's tokens from which the budget
// paces its sends one by one: slower than 200 a second, each slot's claim
// and each answer would be a statement of its own. Faster, the slots that
// ask at the same moment share a claim, and answers a mark, without help;
// claims ahead then only cost: at concurrency 500 (the drain benchmark),
// 40 µs more of the worker's CPU and 18 µs of the database's per intent.
const slowGap = 5 * time.Millisecond

// tokenTaken notes a token taken by a slot, for slowPace.
func (d *drain) tokenTaken() {
	now := time.Now().UnixNano()
	if last := d.lastToken.Swap(now); last != 0 {
		g := d.tokenGap.Load()
		d.tokenGap.Store(g - g/8 + (now-last)/8)
	}
}

// slowPace reports whether this worker's tokens come slower than slowGap
// apart (a moving average over the last few).
func (d *drain) slowPace() bool { return d.tokenGap.Load() >= int64(slowGap) }

// paced reports whether slots wait for tokens that come one by one: an
// answer may then wait for others, or for a claim (batcher.holdAnswers).
func (d *drain) paced() bool { return d.waiting.Load() > 0 && d.slowPace() }

// aheadFor is how many intents a slot with a token claims ahead: one for
// each slot waiting for a token that the budget holds a leased token for.
func (d *drain) aheadFor(token bool) int {
	if !token || d.w.budget == nil || !d.slowPace() {
		return 0
	}
	return max(0, min(int(d.waiting.Load()), d.w.budget.Leased(), aheadMax))
}

// putAhead leaves claims for the next slots to get a token.
func (d *drain) putAhead(cs []*sendstate.DrainClaim) {
	now := time.Now()
	d.ahead.mu.Lock()
	for _, c := range cs {
		d.ahead.claims = append(d.ahead.claims, aheadClaim{c: c, at: now})
	}
	d.ahead.mu.Unlock()
	time.AfterFunc(aheadTTL, d.expireAhead)
	if d.afterAhead != nil {
		d.afterAhead(len(cs))
	}
}

// takeAhead takes the oldest intent claimed ahead that has not expired;
// nil when there is none. What remains of its replay window is what the
// claim found, less the time it waited. One claimed under a lease that is
// no longer known to be held (the worker was paused past it) is not sent:
// the intent may be another worker's by now; it is given back if it is
// still this worker's.
func (d *drain) takeAhead() *sendstate.DrainClaim {
	var stale []*sendstate.DrainClaim
	defer func() {
		if len(stale) > 0 {
			go d.unclaim(d.work, stale)
		}
	}()
	d.ahead.mu.Lock()
	defer d.ahead.mu.Unlock()
	for len(d.ahead.claims) > 0 && time.Since(d.ahead.claims[0].at) < aheadTTL {
		a := d.ahead.claims[0]
		d.ahead.claims = d.ahead.claims[1:]
		if !d.held(a.c.Owner) {
			stale = append(stale, a.c)
			continue
		}
		a.c.WindowLeft -= time.Since(a.at)
		return a.c
	}
	return nil
}

// held reports whether the lease of epoch is known to be held now (no
// lease: a worker without one, in tests).
func (d *drain) held(epoch int32) bool {
	if d.w.lease == nil || epoch == 0 {
		return true
	}
	owner, ok := d.w.lease.owner()
	return ok && owner == epoch
}

// aheadLeft reports whether intents claimed ahead wait for a slot.
func (d *drain) aheadLeft() bool {
	d.ahead.mu.Lock()
	defer d.ahead.mu.Unlock()
	return len(d.ahead.claims) > 0
}

// expireAhead gives back the intents claimed ahead that no slot took
// within aheadTTL.
func (d *drain) expireAhead() {
	d.ahead.mu.Lock()
	var old []*sendstate.DrainClaim
	for len(d.ahead.claims) > 0 && time.Since(d.ahead.claims[0].at) >= aheadTTL {
		old = append(old, d.ahead.claims[0].c)
		d.ahead.claims = d.ahead.claims[1:]
	}
	d.ahead.mu.Unlock()
	d.unclaim(d.work, old)
}

// unclaimAhead gives back every intent claimed ahead (the drain stops).
func (d *drain) unclaimAhead(ctx context.Context) {
	d.ahead.mu.Lock()
	var all []*sendstate.DrainClaim
	for _, a := range d.ahead.claims {
		all = append(all, a.c)
	}
	d.ahead.claims = nil
	d.ahead.mu.Unlock()
	d.unclaim(ctx, all)
}

// unclaim gives claims never attempted back as they were, trying again
// every interval until the database answers or ctx ends (then the fleet's
// sweeper rescues them once the worker's lease has ended).
func (d *drain) unclaim(ctx context.Context, cs []*sendstate.DrainClaim) {
	if len(cs) == 0 {
		return
	}
	byOwner := map[int32][]string{}
	for _, c := range cs {
		byOwner[c.Owner] = append(byOwner[c.Owner], c.Record.Key)
	}
	for owner, keys := range byOwner {
		for {
			_, err := sendstate.UnclaimDrained(ctx, d.w.pool, keys, owner)
			if err == nil {
				break
			}
			d.w.cfg.Logger.Warn("drain: cannot give back intents claimed ahead", "error", err)
			if sleepCtx(ctx, d.interval) != nil {
				return
			}
		}
		if b := d.w.batch; b != nil {
			for _, k := range keys {
				b.flying.remove(k)
			}
		}
	}
	d.wake()
}
