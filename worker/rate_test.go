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

// Quotas are counted, not turned into rates (issue 23): 10/s,50000/d paces
// at 10/s, where the daily quota used to become 0.58/s.
func TestParseQuotas(t *testing.T) {
	t.Parallel()
	limits, err := ParseRateLimits("10/s,50000/d,1000000/mo")
	if err != nil {
		t.Fatal(err)
	}
	if got := budgetRate(limits); got != 10 {
		t.Errorf("budget rate %v, want 10: a quota is no rate", got)
	}
	if q := budgetQuotas(limits); len(q) != 2 || q[0].Count != 50000 || q[0].Per != "d" || q[1].Count != 1000000 || q[1].Per != "mo" {
		t.Errorf("quotas %+v", q)
	}
	if s := limits[1].String() + "," + limits[2].String(); s != "50000/d,1000000/mo" {
		t.Errorf("rendered %s", s)
	}
	if err := (RateLimit{Count: 5, Per: 48 * time.Hour}).check(); err == nil || !strings.Contains(err.Error(), "Day or Month") {
		t.Errorf("a 48h period: %v", err)
	}
}
