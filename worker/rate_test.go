package worker

import (
	"strings"
	"testing"
	"time"
)

func TestParseRateLimits(t *testing.T) {
	t.Parallel()
	good := map[string]float64{"10/s": 10, "600/m": 10, "36000/h": 10, "10/s,500/m": 500.0 / 60, " 5/s , 1/h ": 1.0 / 3600}
	for in, want := range good {
		limits, err := ParseRateLimits(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := budgetRate(limits); got < want*0.999 || got > want*1.001 {
			t.Errorf("%q: budget rate %v, want %v", in, got, want)
		}
	}
	if l, _ := ParseRateLimits("600/m"); l[0] != (RateLimit{600, time.Minute}) || l[0].String() != "600/m" {
		t.Errorf("600/m parsed as %+v (%s)", l, l)
	}
	bad := map[string]string{"0": "COUNT/UNIT", "-1/s": "1 or more", "0/s": "1 or more", "10/fortnight": `unit "fortnight"`,
		"abc": "COUNT/UNIT", "": "COUNT/UNIT", "10/": `unit ""`, "10/s,": "COUNT/UNIT"}
	for in, want := range bad {
		if _, err := ParseRateLimits(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %s", in, err, want)
		}
	}
}
