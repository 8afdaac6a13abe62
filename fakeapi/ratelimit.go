package fakeapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names the rate limiter writes when Config.RateHeaders is set: the
// IETF httpapi draft's RateLimit fields (draft-ietf-httpapi-ratelimit-headers).
const (
	headerRateLimitLimit     = "RateLimit-Limit"
	headerRateLimitRemaining = "RateLimit-Remaining"
	headerRateLimitReset     = "RateLimit-Reset"
	headerRateLimitPolicy    = "RateLimit-Policy"
)

// maxRateCount bounds RateLimit.Count so the limiter's integer arithmetic
// (count × nanoseconds) cannot overflow.
const maxRateCount = 1_000_000_000

// RateLimit is one limit on the requests of an API key: Count requests per
// Per. The fake enforces it as a token bucket that refills at Count/Per and
// holds one second's worth of that rate, but at least one token:
//
//	10/s     capacity 10, one token every 100 ms
//	600/m    capacity 10, one token every 100 ms
//	5/m      capacity 1,  one token every 12 s
//
// So a burst is at most a second's worth of requests, and over any longer
// span the average stays within Count per Per.
type RateLimit struct {
	Count int
	Per   time.Duration
}

// String renders the limit as ParseRate reads it: "10/s", "600/m",
// "36000/h". A Per that is not a second, a minute or an hour is written as a
// Go duration ("10/500ms"), which ParseRate does not read back.
func (l RateLimit) String() string {
	unit := l.Per.String()
	for _, u := range rateUnits {
		if l.Per == u.per {
			unit = u.name
		}
	}
	return strconv.Itoa(l.Count) + "/" + unit
}

// capacity is the bucket size in tokens: one second's worth of the rate,
// rounded down, and at least 1.
func (l RateLimit) capacity() int64 {
	return max(1, int64(l.Count)*int64(time.Second)/int64(l.Per))
}

func (l RateLimit) check() error {
	switch {
	case l.Count < 1 || l.Count > maxRateCount:
		return fmt.Errorf("count %d is not between 1 and %d", l.Count, maxRateCount)
	case l.Per <= 0:
		return fmt.Errorf("period %s is not positive", l.Per)
	}
	return nil
}

var rateUnits = []struct {
	name string
	per  time.Duration
}{
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
}

const rateSyntax = "want COUNT/UNIT with UNIT s, m or h, such as 10/s, 600/m or 36000/h; several comma-separated, like 10/s,500/m"

// ParseRate reads one or more limits separated by commas, each COUNT/UNIT
// with a positive whole COUNT and UNIT s (second), m (minute) or h (hour):
// "10/s", "600/m", "10/s,500/m". Spaces around items are ignored. Every
// limit must hold for a request to pass. The error names the item and what
// is wrong with it.
func ParseRate(s string) ([]RateLimit, error) {
	return parseList("rate", s, rateSyntax, func(item string) (RateLimit, error) {
		if item == "" {
			return RateLimit{}, fmt.Errorf("rate %q has an empty item between commas: %s", s, rateSyntax)
		}
		l, err := parseRateItem(item)
		if err != nil {
			return RateLimit{}, fmt.Errorf("rate %q: %v", item, err)
		}
		return l, nil
	})
}

// parseList reads s, a list of what (a rate, a quota) separated by commas,
// with parseItem, which gets each item without the spaces around it and
// names it in its error; syntax says what the list should look like.
func parseList[T any](what, s, syntax string, parseItem func(item string) (T, error)) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New(what + " is empty: " + syntax)
	}
	var out []T
	for item := range strings.SplitSeq(s, ",") {
		v, err := parseItem(strings.TrimSpace(item))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseRateItem(item string) (RateLimit, error) {
	count, unit, ok := strings.Cut(item, "/")
	count, unit = strings.TrimSpace(count), strings.TrimSpace(unit)
	switch {
	case !ok:
		return RateLimit{}, errors.New(`no "/UNIT": ` + rateSyntax)
	case count == "":
		return RateLimit{}, errors.New("no count before the /: " + rateSyntax)
	case unit == "":
		return RateLimit{}, errors.New("no unit after the /: " + rateSyntax)
	}
	n, err := strconv.Atoi(count)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return RateLimit{}, fmt.Errorf("count %s is too large (at most %d)", count, maxRateCount)
	case err != nil:
		return RateLimit{}, fmt.Errorf("count %q is not a whole number: %s", count, rateSyntax)
	case n < 1:
		return RateLimit{}, fmt.Errorf("count %d is not positive: a limit admits at least 1 request", n)
	case n > maxRateCount:
		return RateLimit{}, fmt.Errorf("count %d is too large (at most %d)", n, maxRateCount)
	}
	for _, u := range rateUnits {
		if unit == u.name {
			return RateLimit{Count: n, Per: u.per}, nil
		}
	}
	return RateLimit{}, fmt.Errorf("unit %q is not s, m or h", unit)
}

// formatRate renders limits as ParseRate reads them, for logs.
func formatRate(limits []RateLimit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

// checkRate validates Config.Rate, saying which limit is wrong.
func checkRate(limits []RateLimit) error {
	for i, l := range limits {
		if err := l.check(); err != nil {
			return fmt.Errorf("rate limit %d (%d per %s): %v", i, l.Count, l.Per, err)
		}
	}
	return nil
}

// bucket is the token bucket of one API key under one limit. The level is
// kept in integer units so refills are exact under an injected clock: one
// token is Per units, and the bucket gains Count units per nanosecond, which
// is Count tokens per Per without rounding.
type bucket struct {
	level int64     // units; a token is int64(limit.Per) units
	last  time.Time // when level was last brought up to date
}

// bucketKey names the bucket of one API key under one of Config.Rate.
type bucketKey struct {
	apiKey string
	limit  int
}

// refill brings b up to now under l. A clock that moved back refills
// nothing and keeps the later mark, so no time is counted twice.
func (b *bucket) refill(l RateLimit, now time.Time) {
	elapsed := now.Sub(b.last)
	if elapsed <= 0 {
		return
	}
	b.last = now
	full := l.capacity() * int64(l.Per)
	need := full - b.level
	rate := int64(l.Count)
	if need <= 0 || int64(elapsed) >= ceilDiv(need, rate) {
		b.level = full
		return
	}
	b.level += int64(elapsed) * rate
}

// untilTokens is how long until the bucket holds level units, at l's rate.
func untilTokens(l RateLimit, have, want int64) time.Duration {
	if have >= want {
		return 0
	}
	return time.Duration(ceilDiv(want-have, int64(l.Count)))
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilSeconds renders d as whole seconds rounded up, so a client that waits
// that long never comes back early.
func ceilSeconds(d time.Duration) string {
	return strconv.FormatInt(ceilDiv(int64(d), int64(time.Second)), 10)
}

// rateDecision is what the limiter decided for one request, and the state
// of the limit it reports in headers.
type rateDecision struct {
	allowed    bool
	limit      RateLimit // the limit reported: the one blocking, or the closest to blocking
	capacity   int64
	remaining  int64         // whole tokens left after this request
	retryAfter time.Duration // until the next token of every limit (when refused)
	reset      time.Duration // until the reported bucket is full again
}

// admitLocked spends one token of every limit of the API key, or none when
// any limit has no token left: a refused request does not count against
// the limits. The caller holds s.mu.
func (s *Server) admitLocked(apiKey string, now time.Time) rateDecision {
	limits := s.cfg.Rate
	bs := make([]*bucket, len(limits))
	allowed := true
	for i, l := range limits {
		k := bucketKey{apiKey: apiKey, limit: i}
		b := s.buckets[k]
		if b == nil {
			b = &bucket{level: l.capacity() * int64(l.Per), last: now}
			s.buckets[k] = b
		}
		b.refill(l, now)
		bs[i] = b
		if b.level < int64(l.Per) {
			allowed = false
		}
	}
	d := rateDecision{allowed: allowed}
	report := -1
	for i, l := range limits {
		b := bs[i]
		if allowed {
			b.level -= int64(l.Per)
		}
		full := l.capacity() * int64(l.Per)
		remaining := b.level / int64(l.Per)
		next := untilTokens(l, b.level, int64(l.Per))
		reset := untilTokens(l, b.level, full)
		// Report the limit a client must mind most: when refused, the one
		// whose next token is furthest; when allowed, the one with the
		// fewest tokens left, then the one slowest to refill.
		better := report < 0
		if !better && !allowed {
			better = next > d.retryAfter
		}
		if !better && allowed {
			better = remaining < d.remaining || (remaining == d.remaining && reset > d.reset)
		}
		if better {
			report = i
			d.limit, d.capacity, d.remaining, d.reset = l, l.capacity(), remaining, reset
			if !allowed {
				d.retryAfter = next
			}
		}
	}
	return d
}

// applyRateLimit runs the limiter for an authenticated request. It reports
// whether the request may go on; when not, the call holds the 429 answer.
// With Config.RateHeaders every limited request's answer carries the
// RateLimit fields, refused or not.
func (s *Server) applyRateLimit(c *call) bool {
	if len(s.cfg.Rate) == 0 {
		return true
	}
	s.mu.Lock()
	d := s.admitLocked(c.apiKey, s.now())
	if !d.allowed {
		s.rateLimited++
	}
	s.mu.Unlock()
	if s.cfg.RateHeaders {
		c.header.Set(headerRateLimitLimit, strconv.FormatInt(d.capacity, 10))
		c.header.Set(headerRateLimitRemaining, strconv.FormatInt(d.remaining, 10))
		c.header.Set(headerRateLimitReset, ceilSeconds(d.reset))
		c.header.Set(headerRateLimitPolicy, s.ratePolicy())
	}
	if d.allowed {
		return true
	}
	c.rateLimited = true
	if s.cfg.RateRetryAfter {
		c.header.Set(headerRetryAfter, ceilSeconds(d.retryAfter))
	}
	c.fail(newError(http.StatusTooManyRequests, typeRateLimit, "rate_limited",
		"Too many requests: this API key is over its rate limit of "+d.limit.String()+". The request was not processed."))
	return false
}

// ratePolicy is RateLimit-Policy for the configured limits and quotas:
// each rate as CAPACITY;w=SECONDS, the window over which its bucket
// refills from empty (10/s and 600/m are both 10;w=1, 5/m is 1;w=12), so
// RateLimit-Limit (the capacity) names its policy; then each quota.
func (s *Server) ratePolicy() string {
	var parts []string
	for _, l := range s.cfg.Rate {
		w := ceilDiv(l.capacity()*int64(l.Per), int64(l.Count)*int64(time.Second))
		parts = append(parts, strconv.FormatInt(l.capacity(), 10)+";w="+strconv.FormatInt(max(1, w), 10))
	}
	for _, q := range s.cfg.Quota {
		parts = append(parts, q.policy())
	}
	return strings.Join(parts, ", ")
}

// RateLimited is how many requests the rate limiter (Config.Rate) has
// refused since the server started or was last reset. Injected rate_limit
// and retry_after faults are not counted.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited
}
