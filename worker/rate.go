package worker

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RateLimit is a provider's limit on send requests per API key: Count
// requests per Per.
type RateLimit struct {
	Count int
	Per   time.Duration
}

func (l RateLimit) String() string {
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[l.Per]
	if unit == "" {
		return fmt.Sprintf("%d/%s", l.Count, l.Per)
	}
	return fmt.Sprintf("%d/%s", l.Count, unit)
}

// perSecond is the limit's rate in requests per second.
func (l RateLimit) perSecond() float64 { return float64(l.Count) / l.Per.Seconds() }

// ParseRateLimits parses limits such as "10/s", "600/m", "36000/h" or
// several at once, "10/s,500/m", all of which must hold.
func ParseRateLimits(s string) ([]RateLimit, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("rate limit %q: want COUNT/UNIT, such as 10/s, 600/m or 36000/h", s)
	}
	var out []RateLimit
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		count, unit, ok := strings.Cut(part, "/")
		n, err := strconv.Atoi(count)
		per, known := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("rate limit %q: want COUNT/UNIT, such as 10/s, 600/m or 36000/h", part)
		case n < 1:
			return nil, fmt.Errorf("rate limit %q: the count must be 1 or more", part)
		case !known:
			return nil, fmt.Errorf("rate limit %q: unknown unit %q: want s, m or h", part, unit)
		}
		out = append(out, RateLimit{Count: n, Per: per})
	}
	return out, nil
}

// budgetRate is the rate, in requests per second, that keeps every limit:
// the fleet's bucket holds at most one second of it, so the tightest
// limit's rate bounds both the burst and the pace. 0 when there are none.
func budgetRate(limits []RateLimit) float64 {
	rate := 0.0
	for _, l := range limits {
		if r := l.perSecond(); rate == 0 || r < rate {
			rate = r
		}
	}
	return rate
}
