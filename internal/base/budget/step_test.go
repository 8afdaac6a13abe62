package budget

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestLeaseAtTheConfiguredRate(t *testing.T) {
	b := &bucket{}
	// A new bucket starts full: one second of the rate, and the tokens due
	// within reserveAheadKnown (500ms: the rate is configured), said to be
	// due when the last of them is.
	if got, wait := b.lease(100, 10, DefaultMaxPause); got != 15 || wait != 500*time.Millisecond {
		t.Fatalf("first lease got %d due in %s, want the bucket's 10 and 5 more, the last due in 500ms", got, wait)
	}
	// Empty and leased ahead: the next token, due in 600ms.
	got, wait := b.lease(1, 10, DefaultMaxPause)
	if got != 1 || wait != 600*time.Millisecond {
		t.Fatalf("empty bucket: got %d, wait %s; want the next token, due in 600ms", got, wait)
	}
	b.sinceRefill = 100 * time.Millisecond
	if got, wait := b.lease(5, 10, DefaultMaxPause); got != 1 || wait != 600*time.Millisecond {
		t.Fatalf("after 100ms: got %d due in %s, want 1 due in 600ms", got, wait)
	}
	// 650ms later 6.5 tokens have come: half a token now, and 5 due by 450ms.
	b.sinceRefill = 650 * time.Millisecond
	if got, wait := b.lease(100, 10, DefaultMaxPause); got != 5 || wait != 450*time.Millisecond {
		t.Fatalf("after 650ms got %d due in %s, want 5, the last due in 450ms", got, wait)
	}
	// Never more than asked: a lease takes the tokens of the sends that wait.
	if got, _ := (&bucket{}).lease(3, 10, DefaultMaxPause); got != 3 {
		t.Fatalf("3 sends waiting: got %d tokens, want 3", got)
	}
	// Nothing is handed out further ahead than reserveMax.
	deep := &bucket{rate: 10, ceiling: 10, tokens: -20}
	if got, wait := deep.lease(1, 10, DefaultMaxPause); got != 0 || wait != 1100*time.Millisecond {
		t.Fatalf("20 tokens spoken for at 10/s: got %d, wait %s; want none for 1.1s", got, wait)
	}
	// An idle minute refills one second's worth, not a minute's.
	b.sinceRefill = time.Minute
	if got, wait := b.lease(1000, 10, DefaultMaxPause); got != 15 || wait != 500*time.Millisecond {
		t.Fatalf("after a minute got %d due in %s, want 10 now and 5 due by 500ms", got, wait)
	}
	// A rate found from 429s is known too: its lease reaches
	// reserveAheadKnown ahead.
	found := &bucket{rate: 10, throttles: 1}
	if got, wait := found.lease(100, 0, DefaultMaxPause); got != 5 || wait != 500*time.Millisecond {
		t.Fatalf("found rate: got %d due in %s, want 5, the last due in 500ms", got, wait)
	}
	// In slow start a lease reaches only reserveAhead (100ms) ahead, and
	// so does one while the fleet probes.
	slow := &bucket{rate: 10}
	if got, wait := slow.lease(100, 0, DefaultMaxPause); got != 1 || wait != 100*time.Millisecond {
		t.Fatalf("slow start: got %d due in %s, want 1 due in 100ms", got, wait)
	}
	if (&bucket{rate: 10, ceiling: 10, probeFor: time.Minute}).known() {
		t.Fatal("a probing fleet's rate is known")
	}
}

// With no configured rate a new fleet starts at slowStartRate and doubles
// its rate with use until the first cut (issue 23: no burst in the first
// second), then cuts it in half.
func TestSlowStart(t *testing.T) {
	b := &bucket{}
	got, _ := b.lease(500, 0, DefaultMaxPause)
	if got != 2 || b.rate != slowStartRate {
		t.Fatalf("first lease: %d tokens, rate %v; want 2 (1 now, 1 due within %s) at %v/s", got, b.rate, reserveAhead, slowStartRate)
	}
	// Full use for slowStartDouble doubles the rate.
	for range 50 {
		b.sinceRefill = 10 * time.Millisecond
		b.lease(1000, 0, DefaultMaxPause)
	}
	if b.rate < 1.9*slowStartRate || b.rate > 2.1*slowStartRate {
		t.Fatalf("after %s of full use: rate %v, want twice %v", slowStartDouble, b.rate, slowStartRate)
	}
	// 1.5 s more: over fastStartFrom it doubles every fastStartDouble.
	for range 150 {
		b.sinceRefill = 10 * time.Millisecond
		b.lease(100000, 0, DefaultMaxPause)
	}
	if b.rate < 500 || b.rate > 10000 {
		t.Fatalf("after 2 s of full use: rate %v, want about a thousand", b.rate)
	}
	// Idle: the bucket fills, the rate grows only for the time it was
	// spoken for.
	before := b.rate
	b.sinceRefill = 10 * time.Second
	b.lease(1, 0, DefaultMaxPause)
	if b.rate > 2*before*math.Exp2(reserveAhead.Seconds()/fastStartDouble.Seconds()) {
		t.Fatalf("an idle 10 s raised the rate from %v to %v", before, b.rate)
	}
	// The first fleet signal ends slow start, halving the rate.
	b.sinceCut = time.Hour
	rate := b.rate
	if !b.throttle(0, -1, DefaultMaxPause) || b.rate != rate*cutSlowStart || b.slowStart() {
		t.Fatalf("after the first cut: rate %v (was %v), slow start %v", b.rate, rate, b.slowStart())
	}
}

// A worker leases its share (a tenth of a second of the rate), spends it
// at the rate's spacing and leases again a little later (the round trip),
// so the bucket always holds a few tokens when it comes back. That is full
// use all the same: the rate keeps doubling. It used to count only the
// time the bucket was below one token, and a drain with no --api-rate
// stayed at 557/s (4,800/s with a configured rate).
func TestSlowStartGrowsUnderAWorkersLeases(t *testing.T) {
	b := &bucket{}
	for range 40 { // 40 leases 110 ms apart: 4.4 s
		b.lease(max(1, int(b.rate*leaseShare.Seconds())), 0, DefaultMaxPause)
		b.sinceRefill = leaseShare + 10*time.Millisecond
	}
	if b.rate < 10000 {
		t.Fatalf("after 4.4 s of a worker using its every lease: rate %v, want over 10,000", b.rate)
	}
	// A lease for fewer sends than a share is not full use: the rate
	// stays, however long the bucket sat with tokens in it.
	idle := &bucket{rate: 1000, tokens: 50}
	idle.sinceRefill = time.Second
	idle.lease(20, 0, DefaultMaxPause)
	if idle.rate > 1000*math.Exp2(1/(1000*fastStartDouble.Seconds())) {
		t.Fatalf("a lease of 20 at 1,000/s raised the rate to %v", idle.rate)
	}
}

func TestThrottleCutsOncePerSecondAndGrowsBack(t *testing.T) {
	b := &bucket{rate: 20, sinceCut: time.Hour, throttles: 1}
	if !b.throttle(0, -1, DefaultMaxPause) || b.rate != 20*cutDiscovered {
		t.Fatalf("first 429: rate %v", b.rate)
	}
	// The rest of the same burst of 429s does not cut again: their
	// tokens were leased before the cut, or when is unknown.
	b.sinceCut = 300 * time.Millisecond
	if b.throttle(0, -1, DefaultMaxPause) || b.throttle(0, 400*time.Millisecond, DefaultMaxPause) || b.rate != 20*cutDiscovered {
		t.Fatalf("second 429 within a second cut again: rate %v", b.rate)
	}
	// A 429 of a token leased after the cut: the cut was not enough.
	if !b.throttle(0, 200*time.Millisecond, DefaultMaxPause) || b.rate != 20*cutDiscovered*cutSlowStart {
		t.Fatalf("a 429 of a token leased after the cut: rate %v, want %v", b.rate, 20*cutDiscovered*cutSlowStart)
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
	b.throttle(0, -1, DefaultMaxPause)
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
	b.throttle(2*time.Second, -1, DefaultMaxPause)
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
	b.throttle(365*24*time.Hour, -1, time.Minute)
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
	b.throttle(365*24*time.Hour, -1, time.Minute)
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
	b.throttle(0, -1, time.Minute)
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

// fleetSignal tells a fleet over the limit (429s of several intents, a
// share of the fleet's requests) from one intent's trouble (an intent
// that met 429 before, or a lone 429 among many requests served).
func TestFleetSignal(t *testing.T) {
	for _, tt := range []struct {
		name               string
		repeat             bool
		refusals, requests float64
		want               bool
	}{
		{"a first 429 among few requests", false, 1, 5, true},
		{"a first 429 among 58 (20/s, decayed)", false, 1, 58, true},
		{"a first 429 among a fast drain's requests", false, 1, 300, false},
		{"two poison intents among a fast drain's requests", false, 2, 600, false},
		{"a burst of 429s at the end of slow start", false, 30, 200, true},
		{"an intent that met 429 before, the fleet over the limit", true, 30, 200, false},
		{"an intent that met 429 before, nothing else refused", true, 1, 1000, false},
		{"429s with no requests counted (an older row)", false, 2, 0, true},
	} {
		if got := fleetSignal(tt.repeat, tt.refusals, tt.requests); got != tt.want {
			t.Errorf("%s: fleetSignal(%v, %v, %v) = %v, want %v", tt.name, tt.repeat, tt.refusals, tt.requests, got, tt.want)
		}
	}
}

// The row counts the fleet's requests and first 429s, decaying: two 429s
// half a second apart in a fast drain are no fleet signal, one at a slow
// rate is, and a signal cuts the rate.
func TestRefusedCountsTheFleetsRecentRequests(t *testing.T) {
	b := &bucket{rate: 300, throttles: 1, sinceCut: time.Hour}
	for range 30 {
		b.sinceRefill, b.sinceRecent = 100*time.Millisecond, 100*time.Millisecond
		b.lease(30, 0, DefaultMaxPause)
	}
	if signal, _ := b.refused(0, -1, DefaultMaxPause); signal {
		t.Fatalf("a first 429 among %.0f recent requests: a fleet signal", b.requests)
	}
	b.sinceRecent = 500 * time.Millisecond
	if signal, cut := b.refused(0, -1, DefaultMaxPause); signal || cut || b.rate < 300 {
		t.Fatalf("a second 429 among %.0f recent requests: signal %v, cut %v, rate %v; want none", b.requests, signal, cut, b.rate)
	}
	// Twenty seconds on, the fleet at 20/s: a 429 is 1.7% of its recent
	// requests.
	b = &bucket{rate: 20, throttles: 1, sinceCut: time.Hour, requests: b.requests, refusals: b.refusals, sinceRecent: 20 * time.Second}
	b.decay()
	for range 20 {
		b.sinceRefill, b.sinceRecent = 100*time.Millisecond, 100*time.Millisecond
		b.lease(2, 0, DefaultMaxPause)
	}
	if signal, cut := b.refused(0, -1, DefaultMaxPause); !signal || !cut || b.rate >= 20 {
		t.Fatalf("a first 429 at 20/s: signal %v, cut %v, rate %v; want a cut", signal, cut, b.rate)
	}
}

// TestDescribeRatesPlainly: a rate is written as a number a reader reads
// at a glance, never in exponent form (a fleet at 26450/s showed
// "2.645e+04/s").
func TestDescribeRatesPlainly(t *testing.T) {
	for _, c := range []struct {
		st   Status
		want string
	}{
		{Status{Rate: 26450, Ceiling: 30000}, "26450/s of the configured 30000/s"},
		{Status{Rate: 26449.6, Throttles: 2}, "26450/s, found from 429s, lowered 2 times by 429s"},
		{Status{Rate: 12.54}, "12.5/s and rising"},
		{Status{Rate: 0.5787, Ceiling: 0.5787}, "0.579/s of the configured 0.579/s"},
		{Status{Rate: 3, Ceiling: 10}, "3/s of the configured 10/s"},
	} {
		if got := c.st.Describe(); !strings.HasPrefix(got, c.want) || strings.Contains(got, "e+") {
			t.Errorf("Describe(%+v) = %q, want it to start %q", c.st, got, c.want)
		}
	}
}
