package client

import (
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter is the longest Retry-After the client sleeps through. A server
// asking for more is asking the client to stop: the call fails at once with
// APIError.RetryAfter set, and the caller decides when to come back.
const maxRetryAfter = 60 * time.Second

// decimalSeconds is delay-seconds as the official SDKs read it: a plain
// decimal number, fractions and an exponent allowed, but not the hex, "Inf"
// or "NaN" forms strconv.ParseFloat also takes.
var decimalSeconds = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)

// parseRetryAfter reads a Retry-After value: delay-seconds ("2", "1.5") or an
// HTTP-date, which becomes max(0, ceil(date − now)) whole seconds, so the
// client never comes back earlier than asked. As in the official SDKs the
// date's leading weekday is optional and a date without a zone is UTC. ok is
// false when the value is absent or unusable: negative, non-finite, neither
// a number nor a date. A finite but huge number saturates rather than
// overflowing.
func parseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(value)
	if decimalSeconds.MatchString(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsInf(secs, 0) || secs < 0 {
			return 0, false
		}
		return secondsToDuration(secs), true
	}
	// time.Parse checks a weekday's spelling only, so "Mon, " stands in
	// for a missing one.
	for _, s := range []string{v, "Mon, " + v, v + " GMT", "Mon, " + v + " GMT"} {
		if t, err := http.ParseTime(s); err == nil {
			return secondsToDuration(max(0, math.Ceil(t.Sub(now).Seconds()))), true
		}
	}
	return 0, false
}

// retryAfterFrom reads the Retry-After header of a response.
// http.Header.Get matches the name case-insensitively.
func retryAfterFrom(h http.Header, now time.Time) (time.Duration, bool) {
	return parseRetryAfter(h.Get("Retry-After"), now)
}

// secondsToDuration converts non-negative seconds, saturating at the largest
// Duration instead of overflowing.
func secondsToDuration(secs float64) time.Duration {
	ns := math.Round(secs * float64(time.Second))
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
