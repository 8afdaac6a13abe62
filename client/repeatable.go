package client

import "net/http"

// repeatableCalls holds the retry contract's verdict (its table, copied
// verbatim in testdata/retry-contract-table.md)
// for each write this package makes. true means a second identical request
// cannot mean anything other than the first, so the client may retry it.
// Reads (GET) are not listed: every GET is retried.
//
// TestRepeatableCallsMatchContract holds these entries against that copy.
var repeatableCalls = map[string]bool{
	// The idempotency key turns a repeat into a replay.
	"emails.send":       true,
	"emails.send_batch": true,
	"templates.send":    true,
	"broadcasts.send":   true,
	// Each sets a named state; the new time is in the body.
	"emails.cancel":     true,
	"emails.reschedule": true,
	"broadcasts.cancel": true,
}

// isRepeatable decides whether a call may be retried: every GET; a wrapped
// write by the contract's verdict; a raw request (Client.Do) only when the
// caller marked it Repeatable, as the contract's raw requests are sent once
// unless the caller says otherwise.
func (c *Client) isRepeatable(r *request, o *requestOptions) bool {
	if r.method == http.MethodGet {
		return true
	}
	if r.call != "" {
		return repeatableCalls[r.call]
	}
	return o.repeatable
}
