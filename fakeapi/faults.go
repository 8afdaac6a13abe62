package fakeapi

import (
	"net/http"
	"time"
)

// This file is the list of fault kinds and what each does; fault_parse.go
// reads and writes rules as text, fault_server.go applies them to requests.

// FaultKind is what a fault rule does to a request it matches.
type FaultKind string

// The fault kinds, those that act on requests first, then those that act
// on webhook events. "Before" kinds act before the request is handled, so
// nothing is claimed, stored or delivered; reject acts while a send is
// handled, email by email; "after" kinds act once the request was handled and
// its answer is ready (a send has been delivered and its key stored), on
// successful answers only.
const (
	// FaultErrorBefore answers Status (default 503) without handling.
	FaultErrorBefore FaultKind = "error_before"
	// FaultRateLimit answers 429 rate_limit_error with no Retry-After.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultRetryAfter answers Status (default 429) with a Retry-After header
	// (see Fault.RetryAfter) without handling.
	FaultRetryAfter FaultKind = "retry_after"
	// FaultLatency sleeps Delay before handling. A client that gives up first
	// ends the sleep; the request is then not handled at all.
	FaultLatency FaultKind = "latency"

	// FaultReject refuses, while a send is handled, each email it matches:
	// one the API takes as well formed but will not deliver (a suppressed
	// or rejected recipient). The email is not sent and makes no message.
	// In POST /emails/batch the other emails are still sent and the 200
	// answer lists the refusal in the email's place, with Code; a single
	// send (POST /emails, POST /templates/{id}/send) is answered 422
	// invalid_request_error with Code and stores nothing, so its key stays
	// free. Broadcasts are never refused. Its to= matches each email's own
	// recipients, and each refused email is one firing: p is drawn and
	// times counted per email.
	FaultReject FaultKind = "reject"

	// FaultErrorAfter handles the request, then answers Status (default 503)
	// instead of the real answer: the work is done, the response is lost.
	FaultErrorAfter FaultKind = "error_after"
	// FaultDropAfter handles the request, then closes the connection without
	// a byte of answer (TCP reset).
	FaultDropAfter FaultKind = "drop_after"
	// FaultLatencyAfter handles the request, then sleeps Delay before
	// answering: the window in which an integration test kills its worker.
	FaultLatencyAfter FaultKind = "latency_after"

	// The event kinds act on the webhook events of an email the fake delivered
	// (see Config.WebhookURL), not on requests: they match by the email's own
	// recipients (to=) and Idempotency-Key (key=), draw p and spend times per
	// email (the three event-type kinds) or per event (the webhook_ kinds), and
	// do nothing when no webhook URL is configured. Several webhook_ rules may
	// fire for one event; of the event-type kinds the first to fire wins.

	// FaultBounce makes the email's event email.bounced instead of
	// email.delivered. The email is still sent and in the ledger: the API
	// accepted it, the receiving server bounced it later.
	FaultBounce FaultKind = "bounce"
	// FaultComplain makes the email's event email.complained instead of
	// email.delivered.
	FaultComplain FaultKind = "complain"
	// FaultDelayThenBounce makes two events for the email:
	// email.delivery_delayed, then email.bounced.
	FaultDelayThenBounce FaultKind = "delay_then_bounce"

	// FaultWebhookDuplicate sends the event twice, one copy after the other,
	// with the same event id and the same delivery id.
	FaultWebhookDuplicate FaultKind = "webhook_duplicate"
	// FaultWebhookOutOfOrder holds the event back until Hold (default 1)
	// later events were sent, or at most WebhookHoldMax.
	FaultWebhookOutOfOrder FaultKind = "webhook_out_of_order"
	// FaultWebhookDelay holds the event back for Delay; later events are
	// sent meanwhile.
	FaultWebhookDelay FaultKind = "webhook_delay"
	// FaultWebhookBadSignature signs the event with a wrong secret.
	FaultWebhookBadSignature FaultKind = "webhook_bad_signature"
	// FaultWebhookStale signs the event with a timestamp WebhookStaleBy
	// (301 s) in the past: outside the verifier's 300 s tolerance.
	FaultWebhookStale FaultKind = "webhook_stale"
)

// DefaultRejectCode is the error code of a reject rule that names none.
const DefaultRejectCode = "recipient_rejected"

// Fault is one fault rule: a kind, what it needs, and which requests it
// matches. The zero value of every matcher matches everything.
//
// In text (flags, env, the X-Fake-Fault header, POST /_fake/faults) a rule is
//
//	kind[=value][;option=value]...
//
// with ':' accepted in place of ';' where an option name follows it, so
// "error_before=503:times=2:to=flaky@" and "error_before=503;times=2;to=flaky@"
// are the same rule, and "key=invoice:42" keeps its colon. The value is the
// status for error_before/error_after, the duration for latency/latency_after,
// the Retry-After value for retry_after, the error code for reject, the
// duration for webhook_delay and the count of later events for
// webhook_out_of_order. Options: status, times, p, to, key, path, method.
// See the package documentation for examples.
type Fault struct {
	Kind FaultKind

	// Status is the HTTP status of error_before and error_after (default 503)
	// and of retry_after (default 429). 400 to 599.
	Status int
	// Delay is how long latency and latency_after sleep.
	Delay time.Duration
	// RetryAfter is the Retry-After of retry_after: a number of seconds sent
	// as written ("2", "1.5", "120" for a wait over a minute), or an HTTP-date
	// computed when answering from the fake's clock: "date" (now), "date+5s",
	// "date-5s".
	RetryAfter string
	// Code is the error code of reject (default recipient_rejected): letters,
	// digits and '_'.
	Code string
	// Hold is how many later events webhook_out_of_order lets go first
	// (default 1).
	Hold int

	// To matches a request with any recipient (to, cc or bcc, of the email or
	// of any email in a batch) containing this text, case-insensitively. For
	// reject it matches each email of a send by that email's own recipients.
	To string
	// Key matches a request whose Idempotency-Key contains this text.
	Key string
	// Path matches the request path as a path.Match glob: "/emails",
	// "/emails/*", "/templates/*/send".
	Path string
	// Method matches the request method.
	Method string

	// Times limits the rule to its first Times firings, counted separately
	// per API key and Idempotency-Key (requests without a key share one
	// count). So times=2 fails each keyed send twice and lets its third
	// attempt through. Zero: no limit.
	Times int
	// P fires the rule on a matching request with this probability, drawn
	// from the server's seeded generator. Zero means 1 (always).
	P float64
}

// faultPhase is when a rule acts on a request.
type faultPhase int

const (
	phaseBefore faultPhase = iota // before the handler: nothing claimed, stored or sent
	phaseHandle                   // inside a send, email by email, after the key is claimed
	phaseAfter                    // once a successful answer is ready
	phaseEvent                    // on the webhook events of a delivered email
)

// faultValue is what the "=value" of a kind's rule holds.
type faultValue int

const (
	valueNone       faultValue = iota // no value
	valueStatus                       // the answer's status, optional
	valueDelay                        // a duration, required
	valueRetryAfter                   // the Retry-After, required
	valueCode                         // the error code, optional
	valueHold                         // how many later events go first, optional
)

// kindSpec is what the parser, the renderer and the server know of a kind.
type kindSpec struct {
	kind  FaultKind
	phase faultPhase
	value faultValue
	// status is the default status of a kind that answers with a status
	// of the rule's choosing (0: the kind takes no status).
	status int
}

// faultKinds is every kind, in the order the parser names them.
var faultKinds = []kindSpec{
	{FaultErrorBefore, phaseBefore, valueStatus, http.StatusServiceUnavailable},
	{FaultErrorAfter, phaseAfter, valueStatus, http.StatusServiceUnavailable},
	{FaultDropAfter, phaseAfter, valueNone, 0},
	{FaultLatency, phaseBefore, valueDelay, 0},
	{FaultLatencyAfter, phaseAfter, valueDelay, 0},
	{FaultRateLimit, phaseBefore, valueNone, 0},
	{FaultRetryAfter, phaseBefore, valueRetryAfter, http.StatusTooManyRequests},
	{FaultReject, phaseHandle, valueCode, 0},
	{FaultBounce, phaseEvent, valueNone, 0},
	{FaultComplain, phaseEvent, valueNone, 0},
	{FaultDelayThenBounce, phaseEvent, valueNone, 0},
	{FaultWebhookDuplicate, phaseEvent, valueNone, 0},
	{FaultWebhookOutOfOrder, phaseEvent, valueHold, 0},
	{FaultWebhookDelay, phaseEvent, valueDelay, 0},
	{FaultWebhookBadSignature, phaseEvent, valueNone, 0},
	{FaultWebhookStale, phaseEvent, valueNone, 0},
}

// spec is the kind's entry in faultKinds; ok is false for an unknown kind.
func (k FaultKind) spec() (kindSpec, bool) {
	for _, s := range faultKinds {
		if s.kind == k {
			return s, true
		}
	}
	return kindSpec{phase: phaseBefore}, false
}

// phase is when the kind acts (an unknown kind: before, as it never fires).
func (k FaultKind) phase() faultPhase {
	s, _ := k.spec()
	return s.phase
}

// eventType reports whether the kind chooses an email's event types
// (bounce, complain, delay_then_bounce) rather than how an event is sent.
func (k FaultKind) eventType() bool {
	return k == FaultBounce || k == FaultComplain || k == FaultDelayThenBounce
}

// answers reports whether the kind decides the answer (as opposed to only
// delaying it). At most one answering rule fires per phase of a request.
func (k FaultKind) answers() bool {
	return k != FaultLatency && k != FaultLatencyAfter
}
