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

// TakeAhead takes, without waiting, a token this worker has leased that is
// due within ahead, when the fleet's rate spaces its tokens at least
// aheadSpacing apart (a rate of 100 a second or less): a send that holds
// one token takes the next few this way, claims their intents with its own
// in one statement, and sends them one after another, each at its token's
// time (Token.At). Faster, one send's request may outlast the spacing, and
// the sends take their tokens one by one (Acquire). ok is false when no
// such token is leased, a bulk send would take it from a send waiting that
// is not, or this worker's own rate has none to spare.
func (b *Budget) TakeAhead(ahead time.Duration, bulk bool) (t Token, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	switch {
	case b.isClosed(), bulk && b.urgent > 0, b.every < aheadSpacing, b.tokens <= 0,
		now.Sub(b.readyAt) >= tokenTTL, b.readyAt.Sub(now) > ahead, b.own.wait(now) > 0:
		return Token{}, false
	}
	at := b.readyAt
	b.tokens--
	b.turns.served++
	if !bulk {
		b.urgentTurns.served++
	}
	b.readyAt = b.readyAt.Add(b.every)
	b.own.take()
	return Token{OK: true, LeasedAt: b.leasedAt, At: at}, true
}

// aheadSpacing is the least spacing of the fleet's tokens at which
// TakeAhead takes one: 10 ms, a rate of 100 a second.
const aheadSpacing = 10 * time.Millisecond
