package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// FaultKind is what a fault rule does to a request it matches.
type FaultKind string

// The fault kinds. "Before" kinds act before the request is handled, so
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
)

// The event kinds act on the webhook events of an email the fake delivered
// (see Config.WebhookURL), not on requests: they match by the email's own
// recipients (to=) and Idempotency-Key (key=), draw p and spend times per
// email (the three event-type kinds) or per event (the webhook_ kinds), and
// do nothing when no webhook URL is configured. Several webhook_ rules may
// fire for one event; of the event-type kinds the first to fire wins.
const (
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

func (k FaultKind) phase() faultPhase {
	switch k {
	case FaultErrorAfter, FaultDropAfter, FaultLatencyAfter:
		return phaseAfter
	case FaultReject:
		return phaseHandle
	case FaultBounce, FaultComplain, FaultDelayThenBounce, FaultWebhookDuplicate,
		FaultWebhookOutOfOrder, FaultWebhookDelay, FaultWebhookBadSignature, FaultWebhookStale:
		return phaseEvent
	default:
		return phaseBefore
	}
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

// optionNames are the option names a rule may carry after its kind.
var optionNames = []string{"status", "times", "p", "to", "key", "path", "method"}

// ParseFault parses one rule, for example "drop_after;p=0.2" or
// "error_before=503:times=2:to=flaky@".
func ParseFault(rule string) (Fault, error) {
	parts := splitRule(strings.TrimSpace(rule))
	kind, value, hasValue := strings.Cut(parts[0], "=")
	f := Fault{Kind: FaultKind(strings.TrimSpace(kind))}
	value = strings.TrimSpace(value)
	var err error
	switch f.Kind {
	case FaultErrorBefore, FaultErrorAfter:
		if hasValue {
			f.Status, err = strconv.Atoi(value)
		}
	case FaultLatency, FaultLatencyAfter, FaultWebhookDelay:
		if !hasValue {
			return Fault{}, fmt.Errorf("fault %q: %s needs a duration, as in %s=2s", rule, f.Kind, f.Kind)
		}
		f.Delay, err = time.ParseDuration(value)
	case FaultRetryAfter:
		if !hasValue {
			return Fault{}, fmt.Errorf("fault %q: retry_after needs a value, as in retry_after=2 or retry_after=date+5s", rule)
		}
		f.RetryAfter = value
	case FaultReject:
		if hasValue && value == "" {
			return Fault{}, fmt.Errorf("fault %q: reject needs a code after '=', as in reject=recipient_rejected", rule)
		}
		f.Code = value
	case FaultWebhookOutOfOrder:
		if hasValue {
			f.Hold, err = strconv.Atoi(value)
		}
	case FaultDropAfter, FaultRateLimit, FaultBounce, FaultComplain, FaultDelayThenBounce,
		FaultWebhookDuplicate, FaultWebhookBadSignature, FaultWebhookStale:
		if hasValue {
			return Fault{}, fmt.Errorf("fault %q: %s takes no value", rule, f.Kind)
		}
	}
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: bad value %q: %v", rule, value, err)
	}
	for _, opt := range parts[1:] {
		name, v, ok := strings.Cut(opt, "=")
		if !ok {
			return Fault{}, fmt.Errorf("fault %q: option %q is not name=value", rule, opt)
		}
		if err := f.setOption(strings.TrimSpace(name), strings.TrimSpace(v)); err != nil {
			return Fault{}, fmt.Errorf("fault %q: %v", rule, err)
		}
	}
	return f.normalized()
}

func (f *Fault) setOption(name, v string) error {
	var err error
	switch name {
	case "status":
		f.Status, err = strconv.Atoi(v)
	case "times":
		f.Times, err = strconv.Atoi(v)
	case "p":
		f.P, err = strconv.ParseFloat(v, 64)
	case "to":
		f.To = v
	case "key":
		f.Key = v
	case "path":
		f.Path = v
	case "method":
		f.Method = strings.ToUpper(v)
	default:
		return fmt.Errorf("unknown option %q (options: %s)", name, strings.Join(optionNames, ", "))
	}
	if err != nil {
		return fmt.Errorf("bad %s %q", name, v)
	}
	return nil
}

// splitRule splits a rule at ';', and at ':' where an option name and '='
// follow, so colons inside values (keys such as "invoice:42") survive.
func splitRule(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ';':
		case ':':
			if !startsWithOption(s[i+1:]) {
				continue
			}
		default:
			continue
		}
		parts = append(parts, s[start:i])
		start = i + 1
	}
	return append(parts, s[start:])
}

func startsWithOption(s string) bool {
	for _, name := range optionNames {
		if strings.HasPrefix(s, name+"=") {
			return true
		}
	}
	return false
}

// ParseFaults parses rules separated by commas or newlines; empty items are
// skipped.
func ParseFaults(rules string) ([]Fault, error) {
	var out []Fault
	for _, line := range strings.FieldsFunc(rules, func(r rune) bool { return r == ',' || r == '\n' }) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f, err := ParseFault(line)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// normalized fills defaults and checks the rule.
func (f Fault) normalized() (Fault, error) {
	switch f.Kind {
	case FaultErrorBefore, FaultErrorAfter:
		if f.Status == 0 {
			f.Status = http.StatusServiceUnavailable
		}
	case FaultRetryAfter:
		if f.Status == 0 {
			f.Status = http.StatusTooManyRequests
		}
		if _, err := retryAfterValue(f.RetryAfter, time.Time{}); err != nil {
			return f, err
		}
	case FaultLatency, FaultLatencyAfter, FaultWebhookDelay:
		if f.Delay <= 0 {
			return f, fmt.Errorf("%s needs a positive delay", f.Kind)
		}
	case FaultWebhookOutOfOrder:
		if f.Hold == 0 {
			f.Hold = 1
		}
		if f.Hold < 0 {
			return f, fmt.Errorf("webhook_out_of_order=%d: want a positive number of later events", f.Hold)
		}
	case FaultBounce, FaultComplain, FaultDelayThenBounce, FaultWebhookDuplicate,
		FaultWebhookBadSignature, FaultWebhookStale:
	case FaultReject:
		if f.Code == "" {
			f.Code = DefaultRejectCode
		}
		if !validCode(f.Code) {
			return f, fmt.Errorf("reject code %q: want letters, digits and '_', as in recipient_rejected", f.Code)
		}
	case FaultDropAfter, FaultRateLimit:
	default:
		return f, fmt.Errorf("unknown fault kind %q (kinds: error_before, error_after, drop_after, latency, latency_after, "+
			"rate_limit, retry_after, reject, bounce, complain, delay_then_bounce, webhook_duplicate, "+
			"webhook_out_of_order, webhook_delay, webhook_bad_signature, webhook_stale)", f.Kind)
	}
	if f.Kind != FaultWebhookOutOfOrder && f.Hold != 0 {
		return f, fmt.Errorf("%s takes no hold count", f.Kind)
	}
	if f.Kind.phase() == phaseEvent && (f.Path != "" || f.Method != "") {
		return f, fmt.Errorf("%s acts on the events of an email, not on a request: path= and method= do not apply (use to= or key=)", f.Kind)
	}
	if f.Kind != FaultReject && f.Code != "" {
		return f, fmt.Errorf("%s takes no code", f.Kind)
	}
	switch f.Kind {
	case FaultErrorBefore, FaultErrorAfter, FaultRetryAfter:
		if f.Status < 400 || f.Status > 599 {
			return f, fmt.Errorf("%s status %d is not 400 to 599", f.Kind, f.Status)
		}
	default:
		if f.Status != 0 {
			return f, fmt.Errorf("%s takes no status", f.Kind)
		}
	}
	if f.Times < 0 {
		return f, errors.New("times must not be negative")
	}
	if f.P < 0 || f.P > 1 {
		return f, fmt.Errorf("p=%v is not between 0 and 1", f.P)
	}
	if f.P == 1 {
		f.P = 0
	}
	if _, err := path.Match(f.Path, "/"); err != nil {
		return f, fmt.Errorf("bad path pattern %q", f.Path)
	}
	return f, nil
}

// validCode reports whether code is 1 to 64 letters, digits and '_', the
// shape of the API's error codes.
func validCode(code string) bool {
	if len(code) == 0 || len(code) > 64 {
		return false
	}
	for _, c := range code {
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// String renders the rule in canonical text, which ParseFault reads back.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	switch f.Kind {
	case FaultErrorBefore, FaultErrorAfter:
		if f.Status != 0 {
			fmt.Fprintf(&b, "=%d", f.Status)
		}
	case FaultLatency, FaultLatencyAfter, FaultWebhookDelay:
		b.WriteString("=" + f.Delay.String())
	case FaultWebhookOutOfOrder:
		if f.Hold > 1 {
			fmt.Fprintf(&b, "=%d", f.Hold)
		}
	case FaultRetryAfter:
		b.WriteString("=" + f.RetryAfter)
		if f.Status != 0 {
			fmt.Fprintf(&b, ";status=%d", f.Status)
		}
	case FaultReject:
		if f.Code != "" {
			b.WriteString("=" + f.Code)
		}
	}
	if f.Times != 0 {
		fmt.Fprintf(&b, ";times=%d", f.Times)
	}
	if f.P != 0 {
		b.WriteString(";p=" + strconv.FormatFloat(f.P, 'g', -1, 64))
	}
	for _, o := range []struct{ name, v string }{{"to", f.To}, {"key", f.Key}, {"path", f.Path}, {"method", f.Method}} {
		if o.v != "" {
			b.WriteString(";" + o.name + "=" + o.v)
		}
	}
	return b.String()
}

// MarshalText renders the rule as String does, so Faults encode as rule text
// in JSON.
func (f Fault) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses rule text as ParseFault does.
func (f *Fault) UnmarshalText(b []byte) error {
	parsed, err := ParseFault(string(b))
	if err != nil {
		return err
	}
	*f = parsed
	return nil
}

// checkFaults normalises a list of rules, or says which one is invalid.
func checkFaults(faults []Fault) ([]Fault, error) {
	out := make([]Fault, len(faults))
	for i, f := range faults {
		n, err := f.normalized()
		if err != nil {
			return nil, fmt.Errorf("fault %d (%s): %v", i, f.Kind, err)
		}
		out[i] = n
	}
	return out, nil
}

// SetFaults replaces the server's fault rules (not those of X-Fake-Fault
// headers) and restarts their times counts. On an invalid rule it changes
// nothing and returns the error.
func (s *Server) SetFaults(faults ...Fault) error {
	checked, err := checkFaults(faults)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = checked
	for k := range s.faultUses {
		if strings.HasPrefix(k.rule, configRulePrefix) {
			delete(s.faultUses, k)
		}
	}
	return nil
}

// Faults returns the server's fault rules.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Fault(nil), s.faults...)
}

// headerFaults parses the X-Fake-Fault headers of a request: each holds one
// or more rules separated by commas.
func headerFaults(h http.Header) ([]Fault, *apiError) {
	var out []Fault
	for _, v := range h.Values(headerFault) {
		faults, err := ParseFaults(v)
		if err != nil {
			e := invalidRequest("invalid_fault", "X-Fake-Fault: "+err.Error())
			e.param = headerFault
			return nil, e
		}
		out = append(out, faults...)
	}
	return out, nil
}

// faultUse counts firings of one rule for one API key and Idempotency-Key.
// Header rules count by their text, so the same header on every retry of a
// call shares one count.
type faultUse struct {
	rule    string
	apiKey  string
	idemKey string
}

const (
	configRulePrefix = "config#"
	headerRulePrefix = "header:"
)

// firedFaults is what the rules that fired in one phase add up to.
type firedFaults struct {
	delay  time.Duration
	answer *Fault
}

// rule is a fault rule with the id its times count is kept under.
type rule struct {
	id string
	Fault
}

// rulesLocked lists the rules that apply to the call: its header rules
// first, then the server's.
func (s *Server) rulesLocked(c *call) []rule {
	return s.rulesWithLocked(c.faults)
}

// rulesWithLocked lists header rules, then the server's.
func (s *Server) rulesWithLocked(header []Fault) []rule {
	out := make([]rule, 0, len(header)+len(s.faults))
	for _, f := range header {
		out = append(out, rule{id: headerRulePrefix + f.String(), Fault: f})
	}
	for i, f := range s.faults {
		out = append(out, rule{id: configRulePrefix + strconv.Itoa(i), Fault: f})
	}
	return out
}

// spendLocked decides whether a rule that matches fires now: it is under its
// times limit for the call's API key and Idempotency-Key, and wins its p
// draw. A firing is counted.
func (s *Server) spendLocked(c *call, r rule) bool {
	return s.spendForLocked(c.apiKey, c.idemKey, r)
}

// spendForLocked is spendLocked for a send identified by its API key and
// Idempotency-Key.
func (s *Server) spendForLocked(apiKey, idemKey string, r rule) bool {
	use := faultUse{rule: r.id, apiKey: apiKey, idemKey: idemKey}
	if r.Times > 0 && s.faultUses[use] >= r.Times {
		return false
	}
	if r.P > 0 && s.rng.Float64() >= r.P {
		return false
	}
	if r.Times > 0 {
		s.faultUses[use]++
	}
	return true
}

// fireLocked runs the rules of one phase (before or after) against the call:
// header rules first, then the server's. Latencies add up; the first
// answering rule wins and later answering rules are not consulted, so they
// neither fire nor spend their times count.
func (s *Server) fireLocked(c *call, phase faultPhase) firedFaults {
	var out firedFaults
	for _, r := range s.rulesLocked(c) {
		f := r.Fault
		if f.Kind.phase() != phase || (f.Kind.answers() && out.answer != nil) || !f.matches(c) || !s.spendLocked(c, r) {
			continue
		}
		c.fired = append(c.fired, f.String())
		if f.Kind.answers() {
			out.answer = &f
		} else {
			out.delay += f.Delay
		}
	}
	return out
}

// rejectLocked runs the reject rules against the emails of a send, in
// request order, header rules before the server's: the first rule that fires
// for an email refuses it. Each refusal is one firing, so p is drawn and
// times counted per email. It returns one error per email, nil for an email
// to send; batch says the emails are named emails[i] in params and messages.
func (s *Server) rejectLocked(c *call, batch bool, specs []messageSpec) []*apiError {
	rules := s.rulesLocked(c)
	refused := make([]*apiError, len(specs))
	fired := map[string]bool{}
	for i, spec := range specs {
		for _, r := range rules {
			if r.Kind != FaultReject || !r.matchesRequest(c) {
				continue
			}
			field, ok := r.rejectedField(spec)
			if !ok || !s.spendLocked(c, r) {
				continue
			}
			param, subject := field, "The email"
			if batch {
				subject = fmt.Sprintf("emails[%d]", i)
				param = subject + "." + field
			}
			refused[i] = newError(http.StatusUnprocessableEntity, typeInvalidRequest, r.Code,
				subject+" was not sent: the API refused it with "+r.Code+" (injected fault reject).")
			refused[i].param = param
			if !fired[r.id] {
				fired[r.id] = true
				c.fired = append(c.fired, r.String())
			}
			break
		}
	}
	return refused
}

// rejectedField says whether a reject rule's recipient matcher takes the
// email, and names the field refused: the first of to, cc and bcc holding a
// matching recipient, or to when the rule names no recipient.
func (f Fault) rejectedField(spec messageSpec) (string, bool) {
	if f.To == "" {
		return "to", true
	}
	for _, l := range []struct {
		field string
		addrs []string
	}{{"to", spec.to}, {"cc", spec.cc}, {"bcc", spec.bcc}} {
		if matchesRecipient(f.To, l.addrs) {
			return l.field, true
		}
	}
	return "", false
}

// matches reports whether the rule takes the request: its method, path and
// key, and, with to=, any recipient of the body (of any email of a batch).
func (f Fault) matches(c *call) bool {
	return f.matchesRequest(c) && (f.To == "" || matchesRecipient(f.To, bodyRecipients(c.body)))
}

// matchesRequest checks the matchers on the request itself: method, path and
// Idempotency-Key.
func (f Fault) matchesRequest(c *call) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, c.r.Method) {
		return false
	}
	if f.Path != "" {
		if ok, _ := path.Match(f.Path, c.r.URL.Path); !ok {
			return false
		}
	}
	return f.Key == "" || strings.Contains(c.idemKey, f.Key)
}

// matchesRecipient reports whether any address contains text,
// case-insensitively.
func matchesRecipient(text string, addrs []string) bool {
	want := strings.ToLower(text)
	for _, addr := range addrs {
		if strings.Contains(strings.ToLower(addr), want) {
			return true
		}
	}
	return false
}

// bodyRecipients collects to/cc/bcc addresses from a send body, including
// every email of a batch, whether given as arrays or (wrongly) as strings.
func bodyRecipients(body []byte) []string {
	var b struct {
		recipientFields
		Emails []recipientFields `json:"emails"`
	}
	if len(body) == 0 || json.Unmarshal(body, &b) != nil {
		return nil
	}
	out := b.all()
	for _, e := range b.Emails {
		out = append(out, e.all()...)
	}
	return out
}

type recipientFields struct {
	To  json.RawMessage `json:"to"`
	Cc  json.RawMessage `json:"cc"`
	Bcc json.RawMessage `json:"bcc"`
}

func (r recipientFields) all() []string {
	var out []string
	for _, raw := range []json.RawMessage{r.To, r.Cc, r.Bcc} {
		var list []string
		var one string
		switch {
		case json.Unmarshal(raw, &list) == nil:
			out = append(out, list...)
		case json.Unmarshal(raw, &one) == nil:
			out = append(out, one)
		}
	}
	return out
}

// applyFaultsBefore runs the before-phase rules: it sleeps their latency and
// answers for an answering rule. It reports whether the request should go on
// to its handler.
func (s *Server) applyFaultsBefore(c *call) bool {
	s.mu.Lock()
	fired := s.fireLocked(c, phaseBefore)
	s.mu.Unlock()
	if !s.pause(c.r.Context(), fired.delay) {
		c.abandon()
		return false
	}
	f := fired.answer
	if f == nil {
		return true
	}
	switch f.Kind {
	case FaultRateLimit:
		c.fail(newError(http.StatusTooManyRequests, typeRateLimit, "rate_limited",
			"Too many requests (injected fault rate_limit)."))
	case FaultRetryAfter:
		v, _ := retryAfterValue(f.RetryAfter, s.now())
		c.header.Set(headerRetryAfter, v)
		c.fail(newError(f.Status, typeForStatus(f.Status), codeForStatus(f.Status),
			"Injected fault retry_after: retry after "+v+"."))
	default:
		c.fail(newError(f.Status, typeForStatus(f.Status), codeForStatus(f.Status),
			"Injected fault error_before: the request was not processed."))
	}
	return false
}

// applyFaultsAfter runs the after-phase rules on a handled, successful call:
// it sleeps their latency, then replaces the answer or drops the connection.
func (s *Server) applyFaultsAfter(c *call) {
	s.mu.Lock()
	fired := s.fireLocked(c, phaseAfter)
	s.mu.Unlock()
	if !s.pause(c.r.Context(), fired.delay) {
		c.abandon()
		return
	}
	if f := fired.answer; f != nil {
		switch f.Kind {
		case FaultDropAfter:
			c.dropped = true
		case FaultErrorAfter:
			c.fail(newError(f.Status, typeForStatus(f.Status), codeForStatus(f.Status),
				"Injected fault error_after: the request was processed but this answer replaces its response."))
		}
	}
}

// retryAfterValue renders a Retry-After spec at now: seconds pass through as
// written; "date", "date+D" and "date-D" become an HTTP-date, rounded up to
// the whole second so the wait is never shorter than asked.
func retryAfterValue(spec string, now time.Time) (string, error) {
	if rest, ok := strings.CutPrefix(spec, "date"); ok {
		var d time.Duration
		if rest != "" {
			var err error
			if d, err = time.ParseDuration(rest); err != nil || (rest[0] != '+' && rest[0] != '-') {
				return "", fmt.Errorf("retry_after %q: expected date, date+DURATION or date-DURATION", spec)
			}
		}
		t := now.Add(d)
		if !t.Equal(t.Truncate(time.Second)) {
			t = t.Truncate(time.Second).Add(time.Second)
		}
		return t.UTC().Format(http.TimeFormat), nil
	}
	if _, err := strconv.ParseFloat(spec, 64); err != nil || spec == "" {
		return "", fmt.Errorf("retry_after %q: expected seconds (2, 1.5, 120) or date, date+5s, date-5s", spec)
	}
	return spec, nil
}
