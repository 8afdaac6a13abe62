package budget

import (
	"math"
	"time"
)

// pace is a token bucket in memory at the rate configured on this worker:
// it caps the worker's own sends, whatever the fleet's rate. Without it a
// worker configured below the fleet would have to lower the fleet's rate
// to keep its own (issue 22: one worker at 1/h stopped three at 20/s). It
// holds one second of the rate, at least one token, as the fleet's does.
type pace struct {
	rate   float64 // requests per second; 0: no rate of its own
	tokens float64
	at     time.Time
}

func newPace(rate float64, now time.Time) pace {
	return pace{rate: rate, tokens: math.Max(1, rate), at: now}
}

func (p *pace) refill(now time.Time) {
	if d := now.Sub(p.at); d > 0 {
		p.tokens = math.Min(math.Max(1, p.rate), p.tokens+p.rate*d.Seconds())
		p.at = now
	}
}

// wait is how long until the pace has a token: 0 when it has one now.
func (p *pace) wait(now time.Time) time.Duration {
	if p.rate == 0 {
		return 0
	}
	p.refill(now)
	if p.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - p.tokens) / p.rate * float64(time.Second))
}

// available is how many sends the pace lets go now.
func (p *pace) available(now time.Time) int {
	if p.rate == 0 {
		return math.MaxInt
	}
	p.refill(now)
	return int(p.tokens)
}

func (p *pace) take() {
	if p.rate > 0 {
		p.tokens--
	}
}
