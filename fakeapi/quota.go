package fakeapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Quota is a limit on the requests of an API key per calendar day or
// month, in UTC: Count requests from midnight to midnight (or from the
// first of the month to the first of the next), counted, never paced. It is
// what email APIs call a daily or monthly sending quota (a free tier's
// 100/day, a plan's 50,000/day).
type Quota struct {
	Count int
	// Monthly makes it a quota per calendar month; otherwise per day.
	Monthly bool
}

// String renders the quota as ParseQuota reads it: "500/d", "100000/mo".
func (q Quota) String() string {
	if q.Monthly {
		return strconv.Itoa(q.Count) + "/mo"
	}
	return strconv.Itoa(q.Count) + "/d"
}

// period is the calendar period holding t, in UTC.
func (q Quota) period(t time.Time) (start, end time.Time) {
	t = t.UTC()
	if q.Monthly {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 0, 1)
}

const quotaSyntax = "want COUNT/d or COUNT/mo, such as 500/d or 100000/mo; several comma-separated, like 500/d,10000/mo"

// ParseQuota reads one or more quotas separated by commas: "500/d",
// "100000/mo", "500/d,10000/mo". Every one must hold.
func ParseQuota(s string) ([]Quota, error) {
	return parseList("quota", s, quotaSyntax, func(item string) (Quota, error) {
		count, unit, ok := strings.Cut(item, "/")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		unit = strings.TrimSpace(unit)
		switch {
		case !ok || err != nil:
			return Quota{}, fmt.Errorf("quota %q: %s", item, quotaSyntax)
		case n < 1 || n > maxRateCount:
			return Quota{}, fmt.Errorf("quota %q: count %d is not between 1 and %d", item, n, maxRateCount)
		case unit != "d" && unit != "mo":
			return Quota{}, fmt.Errorf("quota %q: unit %q is not d or mo", item, unit)
		}
		return Quota{Count: n, Monthly: unit == "mo"}, nil
	})
}

// quotaKey names the count of one API key under one of Config.Quota.
type quotaKey struct {
	apiKey string
	quota  int
}

// quotaCount is one key's count in one period.
type quotaCount struct {
	start time.Time
	used  int
}

// applyQuota counts an authenticated request the rate limiter passed
// against every quota of its key, or refuses it when one is used up: 429
// rate_limit_error with code daily_quota_exceeded (monthly_quota_exceeded),
// a message naming the quota and its reset, and Retry-After the seconds
// until that reset, as the email APIs with sending quotas answer. A refused
// request counts against no quota.
func (s *Server) applyQuota(c *call) bool {
	if len(s.cfg.Quota) == 0 {
		return true
	}
	s.mu.Lock()
	now := s.now()
	refused := -1
	var reset time.Time
	for i, q := range s.cfg.Quota {
		k := quotaKey{apiKey: c.apiKey, quota: i}
		start, end := q.period(now)
		n := s.quotaUsed[k]
		if n == nil || !n.start.Equal(start) {
			n = &quotaCount{start: start}
			s.quotaUsed[k] = n
		}
		if n.used >= q.Count && (refused < 0 || end.After(reset)) {
			refused, reset = i, end
		}
	}
	if refused < 0 {
		for i := range s.cfg.Quota {
			s.quotaUsed[quotaKey{apiKey: c.apiKey, quota: i}].used++
		}
	} else {
		s.quotaRefused++
	}
	s.mu.Unlock()
	if refused < 0 {
		return true
	}
	q := s.cfg.Quota[refused]
	wait := reset.Sub(now)
	c.rateLimited = true
	c.header.Set(headerRetryAfter, ceilSeconds(wait))
	if s.cfg.RateHeaders {
		c.header.Set(headerRateLimitLimit, strconv.Itoa(q.Count))
		c.header.Set(headerRateLimitRemaining, "0")
		c.header.Set(headerRateLimitReset, ceilSeconds(wait))
		c.header.Set(headerRateLimitPolicy, q.policy())
	}
	code, name := "daily_quota_exceeded", "daily"
	if q.Monthly {
		code, name = "monthly_quota_exceeded", "monthly"
	}
	c.fail(newError(http.StatusTooManyRequests, typeRateLimit, code,
		fmt.Sprintf("You have reached the %s sending quota of this API key (%s). It resets at %s. The request was not processed.",
			name, q, reset.Format(time.RFC3339))))
	return false
}

// policy is the quota as a RateLimit-Policy item: COUNT;w=SECONDS of the
// period (a month is written as 30 days: the field has no calendar).
func (q Quota) policy() string {
	w := 86400
	if q.Monthly {
		w = 30 * 86400
	}
	return strconv.Itoa(q.Count) + ";w=" + strconv.Itoa(w)
}

// QuotaRefused is how many requests a quota (Config.Quota) has refused
// since the server started or was last reset.
func (s *Server) QuotaRefused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quotaRefused
}
