package budget

import (
	"math"
	"time"
)

// Return gives back n tokens taken for sends that made no request: the
// intent was parked before its call (suppressed, unsubscribed, its window
// over), its claim found nothing to send, or the worker's lease ended
// first. This worker's next sends take them before any new lease, so a
// token spent on no request neither holds back the next deliverable send
// nor counts as a request. A returned token that no send takes within
// tokenTTL is refunded to the quotas' count at the next lease, like any
// leased token left unspent.
func (b *Budget) Return(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.tokens == 0 || now.Sub(b.readyAt) >= tokenTTL {
		if b.tokens > 0 {
			// Expired unspent: off the quota's count again.
			b.store.quota.refund.Add(int64(b.tokens))
		}
		b.tokens, b.readyAt, b.leasedAt = 0, now, now
	}
	b.tokens += n
	b.own.give(n)
}

// give puts n tokens back into the pace, up to what it holds at most.
func (p *pace) give(n int) {
	if p.rate > 0 {
		p.tokens = math.Min(math.Max(1, p.rate), p.tokens+float64(n))
	}
}

// Leased is how many tokens this worker holds leased and not yet taken by
// a send: the sends waiting for a token take them next, one each, at the
// lease's spacing. The drain claims that many intents ahead for them.
func (b *Budget) Leased() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.readyAt) >= tokenTTL {
		return 0
	}
	return b.tokens
}
