package fakeapi

import (
	"testing"
	"time"
)

// TestRefusalSpendsNoTokenOfAnyLimit shows that a request refused by one
// limit leaves the other limits' buckets as they were: all limits must hold,
// and only an admitted request pays.
func TestRefusalSpendsNoTokenOfAnyLimit(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	s := New(Config{Rate: []RateLimit{{10, time.Second}, {1, time.Minute}}, Now: func() time.Time { return now }})
	defer s.Close()
	tokens := func(limit int) float64 {
		b := s.buckets[bucketKey{apiKey: "oe_test_k", limit: limit}]
		return float64(b.level) / float64(s.cfg.Rate[limit].Per)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.admitLocked("oe_test_k", now); !d.allowed {
		t.Fatal("first request refused")
	}
	for range 5 {
		if d := s.admitLocked("oe_test_k", now); d.allowed || d.limit != (RateLimit{1, time.Minute}) || d.retryAfter != time.Minute {
			t.Fatalf("decision %+v, want refused by 1/m for a minute", d)
		}
	}
	if got := tokens(0); got != 9 {
		t.Fatalf("10/s bucket holds %v tokens after refusals, want 9", got)
	}
	if got := tokens(1); got != 0 {
		t.Fatalf("1/m bucket holds %v tokens, want 0", got)
	}
}

// TestClockMovingBackRefillsNothing keeps a bucket from counting the same
// time twice when an injected clock is set back and forward again.
func TestClockMovingBackRefillsNothing(t *testing.T) {
	t.Parallel()
	l := RateLimit{10, time.Second}
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	b := &bucket{level: 0, last: start}
	b.refill(l, start.Add(-time.Second))
	b.refill(l, start.Add(50*time.Millisecond))
	if want := int64(l.Per) / 2; b.level != want {
		t.Fatalf("level %d, want %d (half a token)", b.level, want)
	}
	b.refill(l, start.Add(time.Hour))
	if want := 10 * int64(l.Per); b.level != want {
		t.Fatalf("level %d, want the capacity %d", b.level, want)
	}
}
