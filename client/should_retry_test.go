package client

import (
	"fmt"
	"testing"
	"time"
)

// TestShouldRetry is section 3 of the retry contract ("The backoff") as a
// table: each row is a line of the contract, for a repeatable call with the
// default two extra attempts unless it says otherwise.
func TestShouldRetry(t *testing.T) {
	t.Parallel()
	const (
		net  = networkFailure
		none = noRetryAfter
		max  = 2 // the default: two extra attempts
	)
	backs, raises := "backoff", "raises"
	waits := func(d time.Duration) string { return "waits " + d.String() }
	for _, tt := range []struct {
		contract   string
		status     int
		retryAfter time.Duration
		attempt    int // 0: the first attempt ended
		maxRetries int
		repeatable bool
		want       string
	}{
		{"network failure: retried", net, none, 0, max, true, backs},
		{"a timeout is a network failure like any other", net, none, 1, max, true, backs},
		{"408 retried", 408, none, 0, max, true, backs},
		{"500 retried", 500, none, 0, max, true, backs},
		{"502 retried", 502, none, 0, max, true, backs},
		{"503 retried", 503, none, 0, max, true, backs},
		{"504 retried", 504, none, 0, max, true, backs},
		{"429 retried only with Retry-After", 429, 2 * time.Second, 0, max, true, waits(2 * time.Second)},
		{"429 without Retry-After raises at once", 429, none, 0, max, true, raises},
		{"every other status raises at once: 400", 400, none, 0, max, true, raises},
		{"every other status raises at once: 409", 409, none, 0, max, true, raises},
		{"every other status raises at once: 422", 422, none, 0, max, true, raises},
		{"every other status raises at once: 501", 501, none, 0, max, true, raises},
		{"every other status raises at once, Retry-After or not", 400, time.Second, 0, max, true, raises},
		{"Retry-After paces: waits exactly that long", 503, 3 * time.Second, 0, max, true, waits(3 * time.Second)},
		{"Retry-After: 0 waits nothing", 503, 0, 0, max, true, waits(0)},
		{"Retry-After of a minute is still waited", 503, time.Minute, 0, max, true, waits(time.Minute)},
		{"Retry-After over a minute: raises (retry_after_seconds)", 503, time.Minute + time.Second, 0, max, true, raises},
		{"429 with Retry-After over a minute raises", 429, time.Hour, 0, max, true, raises},
		{"bounded by max_retries: the second retry", 503, none, 1, max, true, backs},
		{"bounded by max_retries: no third retry", 503, none, 2, max, true, raises},
		{"bounded by max_retries: network failure", net, none, 2, max, true, raises},
		{"max_retries 0 turns retries off", 503, none, 0, 0, true, raises},
		{"max_retries 0 turns retries off: network failure", net, none, 0, 0, true, raises},
		{"a write not repeatable is sent once: network failure", net, none, 0, max, false, raises},
		{"a write not repeatable is sent once: 503", 503, none, 0, max, false, raises},
		{"a write not repeatable is sent once: Retry-After", 503, time.Second, 0, max, false, raises},
	} {
		v := shouldRetry(tt.status, tt.retryAfter, tt.attempt, tt.maxRetries, tt.repeatable)
		got := raises
		switch {
		case v.retry && v.backoff:
			got = backs
		case v.retry:
			got = waits(v.wait)
		}
		if got != tt.want {
			t.Errorf("%s: shouldRetry(%s, retryAfter %s, attempt %d, maxRetries %d, repeatable %t) %s (%s), want %s",
				tt.contract, statusName(tt.status), tt.retryAfter, tt.attempt, tt.maxRetries, tt.repeatable, got, v.why, tt.want)
		}
	}
}

func statusName(s int) string {
	if s == networkFailure {
		return "network failure"
	}
	return fmt.Sprint(s)
}
