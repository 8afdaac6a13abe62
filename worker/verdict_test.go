package worker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sendonce/sendonce/client"
)

// TestDecide is docs/command.md's table "How an outcome becomes a state" for
// the answers that are not a success (a success is recorded sent, with its
// message id, by attempt.sent). Each row: what the API answered, and what
// the intent becomes: its state (pending or failed), whether it is marked
// uncertain, what River does with its job, and the reason it records.
// No database: decide is a pure function; apply carries its verdict out.
func TestDecide(t *testing.T) {
	t.Parallel()
	cfg := (&SendConfig{}).withDefaults() // 23 h window, 10 attempts, 20 snoozes, retries 1 s doubling to 10 min
	first := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	api := func(status int, mod ...func(*client.APIError)) error {
		e := &client.APIError{Status: status, Code: "code", Message: "message"}
		for _, m := range mod {
			m(e)
		}
		return e
	}
	retryAfter := func(d time.Duration) func(*client.APIError) { return func(e *client.APIError) { e.RetryAfter = d } }
	lostAnswer := func(e *client.APIError) { e.Uncertain = true }
	network := &client.NetworkError{Op: "POST", URL: "https://api.example/emails", Err: errors.New("connection reset by peer")}
	// netErr is a network failure as net/http returns it.
	netErr := func(err error, uncertain bool) error {
		return &client.NetworkError{Op: "POST", URL: "https://api.example/emails", Uncertain: uncertain,
			Err: &url.Error{Op: "Post", URL: "https://api.example/emails", Err: err}}
	}
	refused := netErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false)
	noSuchHost := netErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.example", IsNotFound: true}}, false)
	reset := netErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false)
	refusedAfterLost := netErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true)
	// end is an attempt whose error was err, with an hour of its window left,
	// River's first try, no snoozes.
	end := func(err error, mod ...func(*attemptEnd)) attemptEnd {
		e := attemptEnd{err: err, left: time.Hour, jobAttempt: 1, firstAttemptAt: &first}
		for _, m := range mod {
			m(&e)
		}
		return e
	}
	left := func(d time.Duration) func(*attemptEnd) { return func(e *attemptEnd) { e.left = d } }
	tries := func(n int) func(*attemptEnd) { return func(e *attemptEnd) { e.jobAttempt = n } }
	snoozes := func(n int) func(*attemptEnd) { return func(e *attemptEnd) { e.snoozes = n } }
	shutdown := func(e *attemptEnd) { e.canceled = true }
	windowEnded := func(e *attemptEnd) { e.windowEnded = true }
	limited := func(n int, wait time.Duration) func(*attemptEnd) {
		return func(e *attemptEnd) { e.rateLimited, e.rateLimitWait, e.budget = n, wait, true }
	}

	const failed, pending = "failed", "pending"
	for _, tt := range []struct {
		answered  string
		end       attemptEnd
		state     string
		uncertain bool
		river     string // "cancelled", "retried", "back to the queue", "snoozed <wait>"
		result    Result
		reason    string // a part of the recorded reason
	}{
		{"400: refused", end(api(400)), failed, false, "cancelled", ResultFailed, "400 code: message"},
		{"401: refused", end(api(401)), failed, false, "cancelled", ResultFailed, "401 code: message"},
		{"403: refused", end(api(403)), failed, false, "cancelled", ResultFailed, "403 code: message"},
		{"404: refused", end(api(404)), failed, false, "cancelled", ResultFailed, "404 code: message"},
		{"422: refused", end(api(422)), failed, false, "cancelled", ResultFailed, "422 code: message"},
		{"409: the key may be in use, uncertain", end(api(409)), failed, true, "cancelled", ResultFailed, "409 code: message"},
		{"a refusal after a request of the same call whose answer was lost: uncertain", end(api(422, lostAnswer)), failed, true, "cancelled", ResultFailed, uncertainRefusal},
		{"a payload that cannot be sent", end(fmt.Errorf("%w: bad", errUnsendable)), failed, false, "cancelled", ResultFailed, "payload cannot be sent"},
		{"a plain-http base URL off this machine", end(fmt.Errorf("%w (x)", client.ErrInsecureBaseURL)), failed, false, "cancelled", ResultFailed, "http"},

		{"429: pending, its own backoff", end(api(429), limited(1, 2*time.Second)), pending, false, "snoozed 2s", ResultSnoozed, "429 code: message"},
		{"429 never fails, whatever its snoozes", end(api(429), limited(3, 4*time.Second), snoozes(100)), pending, false, "snoozed 4s", ResultSnoozed, "429"},
		{"429 whose wait passes the window", end(api(429), limited(5, 2*time.Minute), left(time.Minute)), failed, false, "cancelled", ResultExpired,
			"replay window ends in 1m0s, before this send may go again after 5 429s in a row"},

		{"Retry-After over 60 s on another error: snoozed exactly", end(api(503, retryAfter(90*time.Second))), pending, true, "snoozed 1m30s", ResultSnoozed, "retry after 1m30s"},
		{"... at most --max-snoozes times", end(api(503, retryAfter(90*time.Second)), snoozes(20)), failed, true, "cancelled", ResultFailed, "gave up after 20 snoozes"},
		{"a refusal with a Retry-After is still a refusal", end(api(400, retryAfter(2*time.Hour))), failed, false, "cancelled", ResultFailed, "400"},
		{"Retry-After on a 503 that passes the window", end(api(503, retryAfter(2*time.Hour))), failed, true, "cancelled", ResultExpired,
			"waiting 2h0m0s would pass the 23h0m0s replay window"},

		{"network error: pending, uncertain, retried", end(network), pending, true, "retried", ResultRetry, "connection reset by peer"},
		{"connection refused: nothing reached the API, not uncertain", end(refused), pending, false, "retried", ResultRetry, "connection refused"},
		{"DNS failure: nothing reached the API, not uncertain", end(noSuchHost), pending, false, "retried", ResultRetry, "no such host"},
		{"... failed after --max-attempts, not uncertain", end(refused, tries(10)), failed, false, "cancelled", ResultFailed, "gave up after 10 attempts"},
		{"... past the window, not uncertain", end(noSuchHost, left(time.Second)), failed, false, "cancelled", ResultExpired, "would pass the 23h0m0s replay window"},
		{"refused after an attempt of the call whose answer was lost: uncertain", end(refusedAfterLost), pending, true, "retried", ResultRetry, "connection refused"},
		{"a reset once connected: uncertain", end(reset), pending, true, "retried", ResultRetry, "connection reset"},
		{"408 after the client's own retries", end(api(408)), pending, true, "retried", ResultRetry, "408 code: message"},
		{"5xx after the client's own retries", end(api(503)), pending, true, "retried", ResultRetry, "503 code: message"},
		{"... failed after --max-attempts", end(api(503), tries(10)), failed, true, "cancelled", ResultFailed, "gave up after 10 attempts"},
		{"... one short of --max-attempts", end(network, tries(9), left(24*time.Hour)), pending, true, "retried", ResultRetry, "connection reset"},

		{"nothing yet: cut off by shutdown", end(network, shutdown), pending, true, "back to the queue", ResultRetry, "connection reset"},
		{"cut off by shutdown while connecting: not uncertain", end(refused, shutdown), pending, false, "back to the queue", ResultRetry, "connection refused"},
		{"cut off by shutdown at the last attempt: the attempt does not count", end(network, shutdown, tries(10)), pending, true, "back to the queue", ResultRetry, ""},

		{"anything, when the next try would pass the window", end(network, left(time.Second)), failed, true, "cancelled", ResultExpired,
			"the next attempt would pass the 23h0m0s replay window"},
		{"the window ended during the attempt", end(network, windowEnded), failed, true, "cancelled", ResultExpired,
			"the 23h0m0s replay window ended during the attempt"},
		{"the window ended while a 429 waited for the budget: the 429 took nothing", end(api(429), windowEnded), failed, false, "cancelled", ResultExpired,
			"replay window exceeded while the send waited for the fleet's rate limit: first attempt at 2026-03-01T09:00:00Z"},
	} {
		v := decide(tt.end, &cfg)
		state, river := pending, ""
		switch v.action {
		case actPark:
			state, river = failed, "cancelled"
		case actRetry:
			river = "retried"
		case actRequeue:
			river = "back to the queue"
		case actSnooze:
			river = "snoozed " + v.wait.String()
		}
		if state != tt.state || v.uncertain != tt.uncertain || river != tt.river || v.result != tt.result || !strings.Contains(v.reason, tt.reason) {
			t.Errorf("%s:\n got  %s, uncertain %t, River %s, observed %q, reason %q\n want %s, uncertain %t, River %s, observed %q, reason containing %q",
				tt.answered, state, v.uncertain, river, v.result, v.reason, tt.state, tt.uncertain, tt.river, tt.result, tt.reason)
		}
	}
}
