package budget

import (
	"testing"
	"time"
)

func TestLeaseAtTheConfiguredRate(t *testing.T) {
	b := &bucket{}
	// A new bucket starts full: one second of the rate.
	if got, _ := b.lease(100, 10); got != 10 {
		t.Fatalf("first lease got %d, want the bucket's 10", got)
	}
	got, wait := b.lease(1, 10)
	if got != 0 || wait != 100*time.Millisecond {
		t.Fatalf("empty bucket: got %d, wait %s; want 0 and 100ms", got, wait)
	}
	// Half a second later five tokens have come, no more.
	b.sinceRefill = 500 * time.Millisecond
	if got, _ := b.lease(100, 10); got != 5 {
		t.Fatalf("after 500ms got %d, want 5", got)
	}
	// An idle minute refills one second's worth, not a minute's.
	b.sinceRefill = time.Minute
	if got, _ := b.lease(1000, 10); got != 10 {
		t.Fatalf("after a minute got %d, want 10", got)
	}
}

func TestLeaseUnlimitedUntilALimitIsMet(t *testing.T) {
	b := &bucket{}
	if got, wait := b.lease(500, 0); got != 500 || wait != 0 {
		t.Fatalf("unlimited lease: %d, %s", got, wait)
	}
	// The first 429 sets the rate from what the sender saw.
	if !b.throttle(0, 40) || b.rate != 40 {
		t.Fatalf("after a 429: rate %v, want 40", b.rate)
	}
	if got, _ := b.lease(500, 0); got != 0 {
		t.Fatalf("right after the 429: got %d tokens, want none", got)
	}
}

func TestThrottleCutsOncePerSecondAndGrowsBack(t *testing.T) {
	b := &bucket{rate: 20, sinceCut: time.Hour}
	if !b.throttle(0, 0) || b.rate != 20*cutDiscovered {
		t.Fatalf("first 429: rate %v", b.rate)
	}
	// The rest of the same burst of 429s does not cut again.
	b.sinceCut = 300 * time.Millisecond
	if b.throttle(0, 0) || b.rate != 20*cutDiscovered {
		t.Fatalf("second 429 within a second cut again: rate %v", b.rate)
	}
	// Demand raises it again, a second at a time at most.
	before := b.rate
	b.sinceRefill = 10 * time.Second
	b.lease(1, 0)
	if grown := b.rate - before; grown <= 0 || grown > b.growth()+0.001 {
		t.Fatalf("growth after an idle 10 s: %v, want one second's (%v)", grown, b.growth())
	}
}

func TestConfiguredRateIsACeiling(t *testing.T) {
	b := &bucket{sinceCut: time.Hour} // a new row was never cut
	b.lease(1, 10)
	b.throttle(0, 0)
	if b.rate != 10*cutConfigured {
		t.Fatalf("after a 429: %v", b.rate)
	}
	for range 50 {
		b.sinceRefill = time.Second
		b.lease(1, 10)
	}
	if b.rate != 10 {
		t.Fatalf("grown past the ceiling or not back to it: %v", b.rate)
	}
}

func TestPauseHandsOutNothing(t *testing.T) {
	b := &bucket{}
	b.lease(1, 10)
	b.throttle(2*time.Second, 0)
	b.sinceRefill = time.Second
	if got, wait := b.lease(5, 10); got != 0 || wait != 2*time.Second {
		t.Fatalf("paused: got %d, wait %s; want 0 and 2s", got, wait)
	}
}
