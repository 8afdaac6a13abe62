package budget

import (
	"math"
	"time"
)

// bucket is a budget row as of one instant, its times measured from that
// instant by the database's clock.
type bucket struct {
	ceiling      float64 // 0: none configured
	rate         float64 // 0: a new row, no lease yet
	tokens       float64 // below 0: tokens leased ahead of time, not due yet
	sinceRefill  time.Duration
	pausedFor    time.Duration // how much longer no token is handed out
	probeFor     time.Duration // how much longer, once the pause is over, only probes go
	sinceCut     time.Duration // since the rate was last lowered
	sinceCeiling time.Duration // since a worker configured with the ceiling leased
	throttles    int64         // how often 429s lowered the rate; 0: slow start

	// The fleet's recent requests and first 429s of intents, decaying
	// (see fleetSignal), as of sinceRecent ago.
	requests, refusals float64
	sinceRecent        time.Duration
}

// How the rate moves (AIMD, as TCP finds a link's capacity): a fleet
// signal (see fleetSignal) cuts it by a factor; while there is demand it
// grows again by a share of itself (or of the ceiling) per second. Cuts
// come at most once per cutEvery, but for a 429 of a request whose token
// was leased after the last cut: the rate that cut set is too high as
// well, and the fleet cuts again, deeper (cutSlowStart; cutDiscovered
// under a ceiling), as soon as the API says so, not a second later.
const (
	cutConfigured = 0.9 // a configured rate was right but for jitter
	cutDiscovered = 0.7
	cutSlowStart  = 0.5 // the rate doubled since the last one the API took
	cutEvery      = time.Second
	minRate       = 0.1 // requests per second
)

// Slow start: with no configured rate a new row starts at slowStartRate
// and, until the first cut, a fleet that uses its whole rate doubles it
// every slowStartDouble (every fastStartDouble above fastStartFrom, where
// few APIs put a limit). The first second of a
// fleet with no --api-rate is about 20 requests, not all it can send
// (issue 23: three workers' first second was 30% refused by an API at
// 20/s); a fleet that meets no limit reaches a thousand a second in about
// two and a half seconds.
const (
	slowStartRate   = 10.0
	slowStartDouble = 500 * time.Millisecond
	fastStartFrom   = 100.0
	fastStartDouble = 100 * time.Millisecond
)

// reserveAhead is how far ahead of time a lease hands out tokens: a
// worker whose lease finds the bucket empty takes the tokens due within
// reserveAhead (or the next one, within reserveMax) and sleeps until they
// are due, instead of reading the row again (issue 23: three workers polling the row cost 5.5 ms of
// database CPU per intent).
const reserveAhead = 100 * time.Millisecond

// reserveAheadKnown is reserveAhead where the rate is known (see known):
// configured, or found from 429s once the fleet has left slow start, and
// the fleet not probing. Such a lease takes the tokens of up to half a
// second for the sends waiting in its worker (no more than wait), so three
// workers at 20/s lease about twice a second each rather than ten times
// (issue 23: database CPU per intent). In slow start, or while probing, a
// lease stays at reserveAhead: tokens leased ahead at a rate the API has
// not taken yet go out as a burst it refuses (issue 23: leasing ahead in
// slow start raised TestDiscoveryStartsSlow's 429s to 4.5%). A rate found
// from 429s grows on by a tenth a second until the next cut, as in slow
// start it doubled; the tokens of a lease go at its spacing, not as a burst.
const reserveAheadKnown = 500 * time.Millisecond

// known reports whether the fleet's rate is known: configured, or found
// from 429s (the fleet has left slow start), and the fleet not probing.
func (b *bucket) known() bool { return !b.slowStart() && b.probeFor == 0 }

// reserve is how far ahead of time this lease hands out tokens.
func (b *bucket) reserve() time.Duration {
	if b.known() {
		return reserveAheadKnown
	}
	return reserveAhead
}

// reserveMax is how far ahead a lease hands out a single token when none
// is due within reserveAhead.
const reserveMax = time.Second

const (
	// ceilingTTL is how long a worker's configured rate stays the fleet's
	// ceiling after that worker last leased, against a lower one.
	ceilingTTL = time.Minute
	// probeEvery spaces the probes, the single requests that go while a
	// Retry-After longer than the max pause has not run out.
	probeEvery = time.Second
)

// slowStart reports whether the fleet is still finding how fast it may
// go: no rate configured and no cut yet.
func (b *bucket) slowStart() bool { return b.ceiling == 0 && b.throttles == 0 }

// growth is how much the rate rises per second of demand, out of slow
// start.
func (b *bucket) growth() float64 {
	if b.ceiling > 0 {
		return math.Max(0.5, b.ceiling*0.1)
	}
	return math.Max(1, b.rate*0.1)
}

// slowStartDouble is how long the rate takes to double in slow start
// while the fleet uses it all.
func (b *bucket) slowStartDouble() time.Duration {
	if b.rate >= fastStartFrom {
		return fastStartDouble
	}
	return slowStartDouble
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
// rate for it, and takes up to want tokens, those due within reserveAhead
// included. It returns how many it took and when they are due (0: now);
// when it took none, how long until one can be leased. ceiling is the
// leasing worker's configured rate (0: none), maxPause its bound on a
// pause.
func (b *bucket) lease(want int, ceiling float64, maxPause time.Duration) (granted int, wait time.Duration) {
	b.seeCeiling(ceiling)
	b.bound(maxPause)
	switch {
	case b.rate == 0 && b.ceiling > 0:
		b.rate, b.tokens = b.ceiling, math.Max(1, b.ceiling)
	case b.rate == 0:
		b.rate, b.tokens = slowStartRate, 1
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
			b.count(1)
			return 1, 0
		}
		return 0, time.Duration((1 - b.tokens) * float64(every))
	}
	if b.slowStart() {
		// Slow start: the rate doubles for every slowStartDouble that the
		// bucket was spoken for (below one token, leased ahead) since the
		// last lease, so it grows while the fleet uses it all, not idle.
		// A lease that asks for half a share or more (leaseShare of the
		// rate) is full use too, whatever the bucket holds: a worker spends
		// its tokens at the rate's spacing and comes back a round trip
		// later, so the bucket always has a few left, and counting only the
		// time below one token held a drain with no --api-rate at 557/s.
		used := math.Min(elapsed, math.Max(0, (1-b.tokens)/b.rate))
		if float64(want) >= b.rate*leaseShare.Seconds()/2 {
			used = elapsed
		}
		b.rate *= math.Exp2(used / b.slowStartDouble().Seconds())
	} else {
		b.rate += b.growth() * math.Min(elapsed, 1)
	}
	if b.ceiling > 0 {
		b.rate = math.Min(b.rate, b.ceiling)
	}
	b.tokens = math.Min(math.Max(1, b.rate), b.tokens+b.rate*elapsed)
	// Tokens due within reserveAhead go too (reserveAheadKnown at a
	// known rate); the lease says when.
	ahead := b.tokens + b.rate*b.reserve().Seconds()
	granted = max(0, min(want, int(ahead)))
	if granted == 0 {
		// One token more, however far ahead (within reserveMax): the
		// worker sleeps until it is due instead of leasing again and
		// again while the others take what comes (issue 23: three workers
		// at 20/s made nearly three leases a send). A worker holds one
		// such token at a time, so the rate a cut lowers is overshot by
		// one request a worker at most.
		due := seconds((1 - b.tokens) / b.rate)
		if due > reserveMax {
			return 0, due - reserveMax
		}
		granted = 1
	}
	b.tokens -= float64(granted)
	b.count(granted)
	if b.tokens < 0 {
		wait = seconds(-b.tokens / b.rate)
	}
	return granted, wait
}

// count adds granted tokens to the recent requests.
func (b *bucket) count(granted int) {
	b.decay()
	b.requests += float64(granted)
}

// throttle lowers the rate after a 429 that is a fleet signal and pauses
// the bucket for pause (a Retry-After, or zero), at most maxPause: the
// rest of a longer pause is spent probing, so a Retry-After of a year
// stops the fleet for maxPause, not a year. tokenAge is how long ago the
// refused request's token was leased (negative: unknown): a token leased
// before the last cut does not cut again. It reports whether it lowered
// the rate.
func (b *bucket) throttle(pause, tokenAge time.Duration, maxPause time.Duration) (cut bool) {
	// A request leased after the last cut and refused within cutEvery of
	// it says the cut was not enough: it cuts deeper.
	again := b.sinceCut < cutEvery && tokenAge >= 0 && tokenAge < b.sinceCut
	switch {
	case b.rate == 0 && b.ceiling > 0:
		b.rate, cut = b.ceiling*cutConfigured, true
	case b.rate == 0:
		b.rate, cut = slowStartRate*cutSlowStart, true
	case b.sinceCut >= cutEvery || again:
		factor := cutDiscovered
		switch {
		case b.ceiling > 0 && !again:
			factor = cutConfigured
		case b.ceiling > 0:
			factor = cutDiscovered
		case b.slowStart() || again:
			factor = cutSlowStart
		}
		b.rate, cut = math.Max(minRate, b.rate*factor), true
	}
	if cut {
		b.sinceCut = 0
		b.throttles++
	}
	b.tokens = math.Min(b.tokens, 0)
	b.pausedFor = max(b.pausedFor, pause)
	b.bound(maxPause)
	return cut
}
