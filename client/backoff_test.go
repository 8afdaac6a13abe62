package client

import (
	"testing"
	"time"
)

// Rule 4: retry n waits uniform in [cap/2, cap], cap = min(0.5s·2^(n-1), 8s).
func TestBackoff(t *testing.T) {
	t.Parallel()
	caps := []struct {
		n   int
		cap time.Duration
	}{
		{1, 500 * time.Millisecond},
		{2, time.Second},
		{3, 2 * time.Second},
		{4, 4 * time.Second},
		{5, 8 * time.Second},
		{6, 8 * time.Second},
		{64, 8 * time.Second},
		{1 << 30, 8 * time.Second},
	}
	for _, tt := range caps {
		if got := backoffCap(tt.n); got != tt.cap {
			t.Errorf("backoffCap(%d) = %v, want %v", tt.n, got, tt.cap)
		}
		lo, hi := tt.cap, time.Duration(0)
		for range 2000 {
			d := backoff(tt.n)
			if d < tt.cap/2 || d > tt.cap {
				t.Fatalf("backoff(%d) = %v, outside [%v, %v]", tt.n, d, tt.cap/2, tt.cap)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Jitter must actually spread the waits over the interval.
		if span := tt.cap / 2; lo > tt.cap/2+span/10 || hi < tt.cap-span/10 {
			t.Errorf("backoff(%d) over 2000 samples spans only [%v, %v] of [%v, %v]", tt.n, lo, hi, tt.cap/2, tt.cap)
		}
	}
}
