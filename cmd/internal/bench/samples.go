package bench

import (
	"slices"
	"time"
)

// Samples holds one figure's value from each run. Benchmarks on a shared
// two-core machine are noisy, so every figure is reported as the median of
// its runs with the spread (min–max) beside it, never as a single run.
type Samples []float64

// Add records one run's value.
func (s *Samples) Add(v float64) { *s = append(*s, v) }

// Len is the number of runs recorded.
func (s Samples) Len() int { return len(s) }

// Median is the middle value, or the mean of the two middle values for an
// even count; zero when there are no samples.
func (s Samples) Median() float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// Min is the smallest value, or zero when there are no samples.
func (s Samples) Min() float64 {
	if len(s) == 0 {
		return 0
	}
	return slices.Min(s)
}

// Max is the largest value, or zero when there are no samples.
func (s Samples) Max() float64 {
	if len(s) == 0 {
		return 0
	}
	return slices.Max(s)
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method: the smallest value that at least p% of the values
// are less than or equal to. It returns zero for no values.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	rank := int(float64(len(c))*p/100 + 0.999999999)
	rank = max(1, min(rank, len(c)))
	return c[rank-1]
}

// Rate is n events over d, per second; zero for a zero duration.
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
