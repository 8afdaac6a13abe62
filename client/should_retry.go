package client

import (
	"net/http"
	"time"
)

// retryStatuses are the statuses after which a repeatable call is retried.
// 429 is among them only when it carries a Retry-After (this API sends none,
// so in practice a rate limit is raised at once).
var retryStatuses = map[int]bool{
	http.StatusRequestTimeout:      true,
	http.StatusTooManyRequests:     true,
	http.StatusInternalServerError: true,
	http.StatusBadGateway:          true,
	http.StatusServiceUnavailable:  true,
	http.StatusGatewayTimeout:      true,
}

// noRetryAfter stands for a response without a usable Retry-After in
// shouldRetry (parseRetryAfter never yields a negative wait).
const noRetryAfter time.Duration = -1

// networkFailure stands for "no response" in shouldRetry's status.
const networkFailure = 0

// retryVerdict is what shouldRetry decided.
type retryVerdict struct {
	// retry is set when the call is attempted again.
	retry bool
	// wait is the server's Retry-After, waited exactly; when backoff is set
	// the client draws a jittered backoff for the retry instead.
	wait    time.Duration
	backoff bool
	// why names the contract's rule that decided (for the table test and
	// the debug log).
	why string
}

// shouldRetry is the retry contract (section 3 of the OpenEmail retry
// contract) as one pure function: whether a call whose attempt (0 for the
// first) ended with status (networkFailure: no response) and retryAfter
// (noRetryAfter: none named) is attempted again, and after what wait.
// repeatable says whether the call may be repeated at all (isRepeatable);
// maxRetries is the client's bound on extra attempts. A 2xx never reaches
// it, and neither does the caller's cancellation, which is never retried.
func shouldRetry(status int, retryAfter time.Duration, attempt, maxRetries int, repeatable bool) retryVerdict {
	switch {
	case !repeatable:
		return retryVerdict{why: "not repeatable: sent once"}
	case attempt >= maxRetries:
		return retryVerdict{why: "retries spent"}
	case status == networkFailure:
		return retryVerdict{retry: true, backoff: true, why: "network failure: backoff"}
	case !retryStatuses[status]:
		return retryVerdict{why: "status raises at once"}
	case retryAfter > maxRetryAfter:
		return retryVerdict{why: "Retry-After over a minute: asked to stop, not to sleep"}
	case retryAfter == noRetryAfter && status == http.StatusTooManyRequests:
		return retryVerdict{why: "429 without Retry-After raises at once"}
	case retryAfter == noRetryAfter:
		return retryVerdict{retry: true, backoff: true, why: "backoff"}
	}
	return retryVerdict{retry: true, wait: retryAfter, why: "paced by Retry-After"}
}
