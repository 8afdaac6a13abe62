package tenants_test

import (
	"testing"

	"github.com/sendonce/sendonce/internal/ops/tenants"
	"github.com/sendonce/sendonce/worker"
)

// TestFormatRate: a rate that --rate parsed is written back as a whole
// count of the first of second, minute and hour that makes one, so that
// 1/h reads 1/h and not 0.0002778/s, 90/m reads 90/m; 600/m is 10/s.
func TestFormatRate(t *testing.T) {
	for in, want := range map[string]string{"5/s": "5/s", "600/m": "10/s", "1/m": "1/m", "1/h": "1/h",
		"7/h": "7/h", "90/m": "90/m", "36000/h": "10/s", "1000000/s": "1000000/s"} {
		l, err := worker.ParseRateLimits(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := tenants.FormatRate(float64(l[0].Count) / l[0].Per.Seconds()); got != want {
			t.Errorf("FormatRate(%s) = %s, want %s", in, got, want)
		}
	}
	if got := tenants.FormatRate(1.0 / 7200); got != "0.0001389/s" {
		t.Errorf("FormatRate(1/7200 s) = %s", got)
	}
}

// TestCount: counts are written with thousands separated, and "+" for
// more than counted.
func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		more bool
		want string
	}{{0, false, "0"}, {999, false, "999"}, {1000, false, "1,000"}, {10_000, true, "10,000+"}, {1234567, false, "1,234,567"}, {-1234, false, "-1,234"}} {
		if got := tenants.Count(c.n, c.more); got != c.want {
			t.Errorf("Count(%d, %v) = %s, want %s", c.n, c.more, got, c.want)
		}
	}
}
