package budget

import (
	"math"
	"time"
)

// bucket is a budget row as of one instant, its times measured from that
// instant by the database's clock.
type bucket struct {
	ceiling     float64 // 0: none configured
	rate        float64 // 0: unlimited (no limit configured or met yet)
	tokens      float64
	sinceRefill time.Duration
	pausedFor   time.Duration // how much longer no token is handed out
	sinceCut    time.Duration // since the rate was last lowered
}

// How the rate moves (AIMD, as TCP finds a link's capacity): a 429 cuts it
// by a factor, at most once per cutEvery; while there is demand it grows
// again by a share of itself (or of the ceiling) per second.
const (
	cutConfigured = 0.9 // a configured rate was right but for jitter
	cutDiscovered = 0.7
	cutEvery      = time.Second
	minRate       = 0.1 // requests per second
)

// growth is how much the rate rises per second of demand.
func (b *bucket) growth() float64 {
	if b.ceiling > 0 {
		return math.Max(0.5, b.ceiling*0.1)
	}
	return math.Max(1, b.rate*0.1)
}

// lease refills the bucket for the time since the last refill, raises the
// rate for it, and takes up to want tokens. It returns how many it took
// and, when none, how long until one can be had.
func (b *bucket) lease(want int, ceiling float64) (granted int, wait time.Duration) {
	b.ceiling = ceiling
	if b.rate == 0 && ceiling > 0 {
		b.rate, b.tokens = ceiling, ceiling
	}
	if b.rate == 0 {
		return want, 0
	}
	elapsed := b.sinceRefill.Seconds()
	b.sinceRefill = 0
	if b.pausedFor > 0 {
		b.tokens = 0
		return 0, b.pausedFor
	}
	b.rate += b.growth() * math.Min(elapsed, 1)
	if b.ceiling > 0 {
		b.rate = math.Min(b.rate, b.ceiling)
	}
	b.tokens = math.Min(math.Max(1, b.rate), b.tokens+b.rate*elapsed)
	granted = min(want, int(b.tokens))
	b.tokens -= float64(granted)
	if granted == 0 {
		wait = time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	}
	return granted, wait
}

// throttle lowers the rate after a 429 and pauses the bucket for pause
// (a Retry-After, or zero). observed is the sender's own rate of sends, the
// starting point when no limit was known. It reports whether it lowered
// the rate (once per cutEvery, however many 429s a burst brings).
func (b *bucket) throttle(pause time.Duration, observed float64) (cut bool) {
	switch {
	case b.rate == 0 && b.ceiling > 0:
		b.rate, cut = b.ceiling*cutConfigured, true
	case b.rate == 0:
		b.rate, cut = math.Max(1, observed), true
	case b.sinceCut >= cutEvery:
		factor := cutDiscovered
		if b.ceiling > 0 {
			factor = cutConfigured
		}
		b.rate, cut = math.Max(minRate, b.rate*factor), true
	}
	if cut {
		b.sinceCut = 0
	}
	b.tokens = math.Min(b.tokens, 0)
	b.pausedFor = max(b.pausedFor, pause)
	return cut
}
