package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

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
