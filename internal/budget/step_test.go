package budget

import (
	"testing"
	"time"
)

func TestLeaseAtTheConfiguredRate(t *testing.T) {
	b := &bucket{}
	// A new bucket starts full: one second of the rate.
	if got, _ := b.lease(100, 10, DefaultMaxPause); got != 10 {
		t.Fatalf("first lease got %d, want the bucket's 10", got)
	}
	got, wait := b.lease(1, 10, DefaultMaxPause)
	if got != 0 || wait != 100*time.Millisecond {
		t.Fatalf("empty bucket: got %d, wait %s; want 0 and 100ms", got, wait)
	}
	// Half a second later five tokens have come, no more.
	b.sinceRefill = 500 * time.Millisecond
	if got, _ := b.lease(100, 10, DefaultMaxPause); got != 5 {
		t.Fatalf("after 500ms got %d, want 5", got)
	}
	// An idle minute refills one second's worth, not a minute's.
	b.sinceRefill = time.Minute
	if got, _ := b.lease(1000, 10, DefaultMaxPause); got != 10 {
		t.Fatalf("after a minute got %d, want 10", got)
	}
}

func TestLeaseUnlimitedUntilALimitIsMet(t *testing.T) {
	b := &bucket{}
	if got, wait := b.lease(500, 0, DefaultMaxPause); got != 500 || wait != 0 {
		t.Fatalf("unlimited lease: %d, %s", got, wait)
	}
	// The first 429 sets the rate from what the sender saw.
	if !b.throttle(0, 40, DefaultMaxPause) || b.rate != 40 {
		t.Fatalf("after a 429: rate %v, want 40", b.rate)
	}
	if got, _ := b.lease(500, 0, DefaultMaxPause); got != 0 {
		t.Fatalf("right after the 429: got %d tokens, want none", got)
	}
}

func TestThrottleCutsOncePerSecondAndGrowsBack(t *testing.T) {
	b := &bucket{rate: 20, sinceCut: time.Hour}
	if !b.throttle(0, 0, DefaultMaxPause) || b.rate != 20*cutDiscovered {
		t.Fatalf("first 429: rate %v", b.rate)
	}
	// The rest of the same burst of 429s does not cut again.
	b.sinceCut = 300 * time.Millisecond
	if b.throttle(0, 0, DefaultMaxPause) || b.rate != 20*cutDiscovered {
		t.Fatalf("second 429 within a second cut again: rate %v", b.rate)
	}
	// Demand raises it again, a second at a time at most.
	before := b.rate
	b.sinceRefill = 10 * time.Second
	b.lease(1, 0, DefaultMaxPause)
	if grown := b.rate - before; grown <= 0 || grown > b.growth()+0.001 {
		t.Fatalf("growth after an idle 10 s: %v, want one second's (%v)", grown, b.growth())
	}
}

func TestConfiguredRateIsACeiling(t *testing.T) {
	b := &bucket{sinceCut: time.Hour} // a new row was never cut
	b.lease(1, 10, DefaultMaxPause)
	b.throttle(0, 0, DefaultMaxPause)
	if b.rate != 10*cutConfigured {
		t.Fatalf("after a 429: %v", b.rate)
	}
	for range 50 {
		b.sinceRefill = time.Second
		b.lease(1, 10, DefaultMaxPause)
	}
	if b.rate != 10 {
		t.Fatalf("grown past the ceiling or not back to it: %v", b.rate)
	}
}

func TestPauseHandsOutNothing(t *testing.T) {
	b := &bucket{}
	b.lease(1, 10, DefaultMaxPause)
	b.throttle(2*time.Second, 0, DefaultMaxPause)
	b.sinceRefill = time.Second
	if got, wait := b.lease(5, 10, DefaultMaxPause); got != 0 || wait != 2*time.Second {
		t.Fatalf("paused: got %d, wait %s; want 0 and 2s", got, wait)
	}
}

// A Retry-After past the max pause pauses for the max pause; the rest of
// it goes to probes, one request a second, none saved up, until the wait
// asked for is over.
func TestLongPauseProbesWithSingleRequests(t *testing.T) {
	b := &bucket{}
	b.lease(1, 20, time.Minute)
	b.throttle(365*24*time.Hour, 0, time.Minute)
	if b.pausedFor != time.Minute || b.probeFor != 365*24*time.Hour {
		t.Fatalf("paused for %s, probing for %s; want a minute, then probes for the year", b.pausedFor, b.probeFor)
	}
	b.pausedFor, b.sinceRefill = 0, 10*time.Second // the minute is over; the bucket sat idle
	if got, _ := b.lease(20, 20, time.Minute); got != 1 {
		t.Fatalf("first probe: got %d tokens, want 1", got)
	}
	if got, wait := b.lease(20, 20, time.Minute); got != 0 || wait != probeEvery {
		t.Fatalf("right after a probe: got %d, wait %s; want none for %s", got, wait, probeEvery)
	}
	b.sinceRefill = probeEvery
	if got, _ := b.lease(20, 20, time.Minute); got != 1 {
		t.Fatalf("a probe later: got %d tokens, want 1", got)
	}
	// A probe that meets another long Retry-After pauses the fleet again.
	b.throttle(365*24*time.Hour, 0, time.Minute)
	if got, wait := b.lease(20, 20, time.Minute); got != 0 || wait != time.Minute {
		t.Fatalf("after a probe's 429: got %d, wait %s; want a pause of a minute", got, wait)
	}
	// Once the asked wait is over the bucket refills at the rate again.
	b.pausedFor, b.probeFor, b.sinceRefill = 0, 0, time.Second
	if got, _ := b.lease(20, 20, time.Minute); got < 10 {
		t.Fatalf("after probing: got %d tokens, want a second of the rate", got)
	}
}

// A row paused longer than the leasing worker's max pause (by an older
// worker, or one with a longer max pause) is bounded by the next lease.
func TestLeaseBoundsALongerPause(t *testing.T) {
	b := &bucket{rate: 20, pausedFor: 365 * 24 * time.Hour}
	if got, wait := b.lease(1, 20, time.Minute); got != 0 || wait != time.Minute || b.probeFor != 365*24*time.Hour {
		t.Fatalf("got %d, wait %s, probing for %s; want a minute's pause, then probes", got, wait, b.probeFor)
	}
}

// The ceiling is the most generous configured rate of a worker that leased
// lately: a worker configured lower leaves it alone until the generous
// workers have been gone for ceilingTTL.
func TestCeilingIsTheMostGenerousRecentRate(t *testing.T) {
	b := &bucket{}
	b.lease(1, 20, time.Minute)
	b.sinceRefill, b.sinceCeiling = time.Second, time.Second
	b.lease(1, 1.0/3600, time.Minute)
	if b.ceiling != 20 || b.rate != 20 {
		t.Fatalf("after a lease at 1/h: ceiling %v, rate %v; want 20 and 20", b.ceiling, b.rate)
	}
	// A worker configured higher raises it, at once.
	b.lease(1, 40, time.Minute)
	if b.ceiling != 40 || b.rate != 40 {
		t.Fatalf("after a lease at 40/s: ceiling %v, rate %v; want 40 and 40", b.ceiling, b.rate)
	}
	// Nobody at 40/s for ceilingTTL: the next worker's rate is the fleet's.
	b.sinceCeiling, b.sinceRefill = ceilingTTL, time.Second
	b.lease(1, 20, time.Minute)
	if b.ceiling != 20 || b.rate != 20 {
		t.Fatalf("40/s gone for %s: ceiling %v, rate %v; want 20 and 20", ceilingTTL, b.ceiling, b.rate)
	}
	// A ceiling raised over a rate the worker at 1/h set first starts at
	// the new ceiling, not at 1/h.
	b = &bucket{}
	b.lease(1, 1.0/3600, time.Minute)
	b.lease(1, 20, time.Minute)
	if b.ceiling != 20 || b.rate != 20 {
		t.Fatalf("1/h first, then 20/s: ceiling %v, rate %v; want 20 and 20", b.ceiling, b.rate)
	}
	// A rate cut by 429s stays cut when the ceiling rises: it grows back.
	b.sinceCut = time.Hour
	b.throttle(0, 0, time.Minute)
	b.lease(1, 40, time.Minute)
	if b.ceiling != 40 || b.rate != 20*cutConfigured {
		t.Fatalf("a cut rate under a raised ceiling: ceiling %v, rate %v; want 40 and %v", b.ceiling, b.rate, 20*cutConfigured)
	}
}

// A worker's own pace caps its sends at its own rate, one second of it at
// most at once.
func TestPace(t *testing.T) {
	start := time.Now()
	p := newPace(1.0/3600, start)
	if p.wait(start) != 0 || p.available(start) != 1 {
		t.Fatalf("a new pace at 1/h: wait %s, available %d; want its one token", p.wait(start), p.available(start))
	}
	p.take()
	if w := p.wait(start.Add(time.Minute)); w < 58*time.Minute || w > 59*time.Minute {
		t.Fatalf("a minute after its token: wait %s, want 59m", w)
	}
	if w := p.wait(start.Add(2 * time.Hour)); w != 0 || p.available(start.Add(2*time.Hour)) != 1 {
		t.Fatalf("two hours later: wait %s, want one token (none saved up)", w)
	}
	none := newPace(0, start)
	if none.wait(start) != 0 || none.available(start) < 1<<30 {
		t.Fatal("no rate of its own: the pace must not hold a send")
	}
}
