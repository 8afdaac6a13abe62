package budget

import (
	"math"
	"time"
)

// A 429 is one of two things: the fleet is over the API's limit (every
// intent would meet it), or one intent's trouble (the API refuses that
// intent's requests while it takes the others'; issue 23: two such
// intents slowed a thousand others 22×, as every 429 cut the fleet's
// rate). The row keeps, decaying by half every signalHalfLife, the
// requests the fleet was given tokens for and the 429s of intents that
// had not met one before; a 429 is a fleet signal when those are at least
// signalShare of the requests. An intent that met a 429 before is its own
// trouble: it backs off on its own (the worker's exponential backoff) and
// its 429s are not counted again, so however long it keeps meeting them,
// the fleet sends on. One intent's first 429 among the requests of a fast
// fleet is no signal (two poison intents among a drain of 300 a second
// are 0.3% of its recent requests); at 20 a second, where one 429 in two
// seconds is 1.7% of them, it is, as it must be for the fleet to keep to
// a limit that refuses a request now and then: an intent's first 429
// cuts the fleet's rate once at most.
const (
	signalHalfLife = 2 * time.Second
	signalShare    = 0.01
)

// fleetSignal decides whether a 429 is evidence that the fleet is over the
// limit. repeat: the intent met a 429 before (its own trouble, whatever
// the others meet); refusals and requests: the fleet's recent first 429s
// of intents (this one included) and requests, decayed.
func fleetSignal(repeat bool, refusals, requests float64) bool {
	if repeat {
		return false
	}
	return refusals > 0 && refusals >= signalShare*math.Max(requests, refusals)
}

// decay ages the recent counts to now.
func (b *bucket) decay() {
	if b.sinceRecent > 0 {
		f := math.Exp2(-b.sinceRecent.Seconds() / signalHalfLife.Seconds())
		b.requests, b.refusals = b.requests*f, b.refusals*f
	}
	b.sinceRecent = 0
}

// refused counts the first 429 of an intent and, when it is a fleet
// signal, throttles the bucket (pause: its Retry-After; tokenAge: how long
// ago its token was leased, negative when unknown). It reports whether it
// was a fleet signal and whether it lowered the rate.
func (b *bucket) refused(pause, tokenAge, maxPause time.Duration) (signal, cut bool) {
	b.decay()
	b.refusals++
	if !fleetSignal(false, b.refusals, b.requests) {
		return false, false
	}
	return true, b.throttle(pause, tokenAge, maxPause)
}
