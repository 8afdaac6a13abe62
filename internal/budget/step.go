package budget

import (
	"math"
	"time"
)

// bucket is a budget row as of one instant, its times measured from that
// instant by the database's clock.
type bucket struct {
	ceiling      float64 // 0: none configured
	rate         float64 // 0: unlimited (no limit configured or met yet)
	tokens       float64
	sinceRefill  time.Duration
	pausedFor    time.Duration // how much longer no token is handed out
	probeFor     time.Duration // how much longer, once the pause is over, only probes go
	sinceCut     time.Duration // since the rate was last lowered
	sinceCeiling time.Duration // since a worker configured with the ceiling leased
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

const (
	// ceilingTTL is how long a worker's configured rate stays the fleet's
	// ceiling after that worker last leased, against a lower one.
	ceilingTTL = time.Minute
	// probeEvery spaces the probes, the single requests that go while a
	// Retry-After longer than the max pause has not run out.
	probeEvery = time.Second
)

// growth is how much the rate rises per second of demand.
func (b *bucket) growth() float64 {
	if b.ceiling > 0 {
		return math.Max(0.5, b.ceiling*0.1)
	}
	return math.Max(1, b.rate*0.1)
}

// seeCeiling takes the rate configured on a leasing worker (0: none) into
// the fleet's ceiling, which is the most generous rate configured on a
// worker that leased within ceilingTTL. Every lease used to write its own
// rate, so one worker started with --api-rate 1/h brought the whole fleet
// to a stop (issue 22); such a worker now paces only itself (the Budget's
// own limiter), and its rate becomes the fleet's only once no worker with
// a higher one has leased for ceilingTTL.
func (b *bucket) seeCeiling(ceiling float64) {
	if ceiling < b.ceiling && b.sinceCeiling < ceilingTTL {
		return
	}
	// A ceiling raised over a rate no 429 had cut starts at the new
	// ceiling, rather than climbing to it from a misconfigured worker's.
	if old := b.ceiling; ceiling > old && old > 0 && b.rate >= old {
		b.rate = ceiling
	}
	b.ceiling, b.sinceCeiling = ceiling, 0
}

// bound keeps a pause to maxPause: the rest of the wait asked for is spent
// probing. A row paused longer (by a worker with a longer max pause, or of
// an older version) is bounded on its next lease.
func (b *bucket) bound(maxPause time.Duration) {
	if b.pausedFor > maxPause {
		b.probeFor = max(b.probeFor, b.pausedFor)
		b.pausedFor = maxPause
	}
	if b.probeFor <= b.pausedFor {
		b.probeFor = 0
	}
}

// lease refills the bucket for the time since the last refill, raises the
// rate for it, and takes up to want tokens. It returns how many it took
// and, when none, how long until one can be had. ceiling is the leasing
// worker's configured rate (0: none), maxPause its bound on a pause.
func (b *bucket) lease(want int, ceiling float64, maxPause time.Duration) (granted int, wait time.Duration) {
	b.seeCeiling(ceiling)
	b.bound(maxPause)
	if b.rate == 0 && b.ceiling > 0 {
		b.rate, b.tokens = b.ceiling, b.ceiling
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
	if b.probeFor > 0 {
		// Probing: one request at a time, one per probeEvery (or per the
		// rate's own spacing, if slower), none saved up. The rate does
		// not grow: no request has been served since the 429.
		every := max(probeEvery, time.Duration(float64(time.Second)/b.rate))
		b.tokens = math.Min(1, math.Max(0, b.tokens)+elapsed/every.Seconds())
		if b.tokens >= 1 {
			b.tokens--
			return 1, 0
		}
		return 0, time.Duration((1 - b.tokens) * float64(every))
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
// (a Retry-After, or zero), at most maxPause: the rest of a longer pause is
// spent probing, so a Retry-After of a year stops the fleet for maxPause,
// not a year. observed is the sender's own rate of sends, the starting
// point when no limit was known. It reports whether it lowered the rate
// (once per cutEvery, however many 429s a burst brings).
func (b *bucket) throttle(pause time.Duration, observed float64, maxPause time.Duration) (cut bool) {
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
	b.bound(maxPause)
	return cut
}
