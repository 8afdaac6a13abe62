package client

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter is the longest Retry-After the client sleeps through. A server
// asking for more is asking the client to stop: the call fails at once with
// APIError.RetryAfter set, and the caller decides when to come back.
const maxRetryAfter = 60 * time.Second

// httpDateLayouts are the HTTP-date forms accepted: the three of RFC 9110
// (IMF-fixdate, RFC 850, asctime), and IMF-fixdate without its optional
// weekday or zone (a missing zone means UTC).
var httpDateLayouts = []string{
	time.RFC1123,
	time.RFC1123Z,
	time.RFC850,
	time.ANSIC,
	"02 Jan 2006 15:04:05 MST",
	"02 Jan 2006 15:04:05 -0700",
	"Mon, 02 Jan 2006 15:04:05",
	"02 Jan 2006 15:04:05",
}

// parseRetryAfter reads a Retry-After value. It accepts delay-seconds, with
// decimals ("1.5"), and HTTP-dates; a date becomes max(0, ceil(date − now))
// whole seconds. ok is false when the value is absent or unusable: negative,
// non-finite, not a number and not a date. Relative forms ("in 5 minutes")
// are refused. A finite but huge number saturates rather than overflowing.
func parseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0 {
			return 0, false
		}
		return secondsToDuration(secs), true
	}
	for _, layout := range httpDateLayouts {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		secs := math.Ceil(t.Sub(now).Seconds())
		if secs < 0 {
			secs = 0
		}
		return secondsToDuration(secs), true
	}
	return 0, false
}

// retryAfterFrom reads the Retry-After header of a response.
// http.Header.Get matches the name case-insensitively.
func retryAfterFrom(h http.Header, now time.Time) (time.Duration, bool) {
	return parseRetryAfter(h.Get("Retry-After"), now)
}

// isDecimal accepts [+-]digits[.digits] or [+-].digits with an optional
// exponent: plain decimal numbers, not the hex, "Inf" or "NaN" forms that
// strconv.ParseFloat also takes.
func isDecimal(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(s)
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
