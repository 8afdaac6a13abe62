package worker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sendonce/sendonce/internal/base/budget"
)

// RateLimit is a provider's limit on send requests per API key: Count
// requests per Per. A Per of a second, a minute or an hour (or any period
// shorter than a day) is a rate: it paces the sends. A Per of Day or Month
// is a quota: it counts them, per calendar day or month in UTC, and is never
// turned into a rate (a daily quota of 50,000 does not mean 0.58/s: a run
// that fits the day's quota goes at the API's rate).
type RateLimit struct {
	Count int
	Per   time.Duration
}

// The Per of a quota.
const (
	// Day is the Per of a daily quota (50000/d): Count requests per
	// calendar day in UTC, from midnight to midnight.
	Day = 24 * time.Hour
	// Month is the Per of a monthly quota (1000000/mo): Count requests
	// per calendar month in UTC. It stands for the calendar month, not
	// for 30 days.
	Month = 30 * Day
)

var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": Day, "mo": Month}

func (l RateLimit) String() string {
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h", Day: "d", Month: "mo"}[l.Per]
	if unit == "" {
		return fmt.Sprintf("%d/%s", l.Count, l.Per)
	}
	return fmt.Sprintf("%d/%s", l.Count, unit)
}

// IsQuota reports whether the limit is a quota (per day or month), which
// the fleet counts, rather than a rate, which paces it.
func (l RateLimit) IsQuota() bool { return l.Per >= Day }

// perSecond is the limit's rate in requests per second.
func (l RateLimit) perSecond() float64 { return float64(l.Count) / l.Per.Seconds() }

// check says what is wrong with a limit given in Go (ParseRateLimits makes
// only good ones).
func (l RateLimit) check() error {
	switch {
	case l.Count < 1:
		return fmt.Errorf("rate limit %s: the count must be 1 or more", l)
	case l.Per <= 0:
		return fmt.Errorf("rate limit %s: want a positive period", l)
	case l.Per > Day && l.Per != Month:
		return fmt.Errorf("rate limit %s: a period of a day or longer is a quota: want Day or Month", l)
	}
	return nil
}

const rateSyntax = "want COUNT/UNIT, such as 10/s, 600/m, 36000/h, 50000/d or 1000000/mo"

// ParseRateLimits parses limits such as "10/s", "600/m", "36000/h", the
// quotas "50000/d" and "1000000/mo", or several at once, "10/s,500/m" or
// "20/s,50000/d", all of which must hold.
func ParseRateLimits(s string) ([]RateLimit, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("rate limit %q: %s", s, rateSyntax)
	}
	var out []RateLimit
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		count, unit, ok := strings.Cut(part, "/")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		per, known := rateUnits[strings.TrimSpace(unit)]
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("rate limit %q: %s", part, rateSyntax)
		case n < 1:
			return nil, fmt.Errorf("rate limit %q: the count must be 1 or more", part)
		case !known:
			return nil, fmt.Errorf("rate limit %q: unknown unit %q: want s, m or h (rates), d or mo (quotas)", part, unit)
		}
		out = append(out, RateLimit{Count: n, Per: per})
	}
	return out, nil
}

// budgetRate is the rate, in requests per second, that keeps every rate
// limit: the fleet's bucket holds at most one second of it, so the
// tightest limit's rate bounds both the burst and the pace. Quotas are not
// rates and take no part. 0 when there are no rates.
func budgetRate(limits []RateLimit) float64 {
	rate := 0.0
	for _, l := range limits {
		if l.IsQuota() {
			continue
		}
		if r := l.perSecond(); rate == 0 || r < rate {
			rate = r
		}
	}
	return rate
}

// budgetQuotas are the quotas among limits, for the fleet's budget to
// count. The tightest of each period holds.
func budgetQuotas(limits []RateLimit) []budget.Quota {
	var out []budget.Quota
	for _, l := range limits {
		if !l.IsQuota() {
			continue
		}
		p := budget.PerDay
		if l.Per == Month {
			p = budget.PerMonth
		}
		found := false
		for i := range out {
			if out[i].Per == p {
				out[i].Count, found = min(out[i].Count, int64(l.Count)), true
			}
		}
		if !found {
			out = append(out, budget.Quota{Count: int64(l.Count), Per: p})
		}
	}
	return out
}
