package client

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateInfo is what a response's rate-limit headers say, on a success or an
// error alike. It reads, in this order of preference:
//
//   - the IETF httpapi draft's structured fields (draft 08 and later):
//     RateLimit: "default";r=5;t=3 and RateLimit-Policy: "default";q=10;w=1,
//     and draft 07's RateLimit: limit=10, remaining=5, reset=3;
//   - the earlier drafts' RateLimit-Limit, RateLimit-Remaining and
//     RateLimit-Reset (delay-seconds), with RateLimit-Limit's policies
//     (10, 10;w=1) or RateLimit-Policy: 10;w=1;
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, whose
//     Reset is delay-seconds to some servers and a Unix time (seconds, or
//     milliseconds) to others: a value past the year 2001 in seconds is
//     taken for a time.
//
// With several limits described, Limit, Remaining and Reset are the ones
// the server reported (draft 08: the item with the fewest remaining).
type RateInfo struct {
	// Limit is the request quota of the limit reported; 0 when not sent.
	Limit int64
	// Remaining is how many requests are left in its window; meaningful
	// when HasRemaining.
	Remaining    int64
	HasRemaining bool
	// Reset is how long until the window resets; 0 when not sent.
	Reset time.Duration
	// Window is the limit's window (a policy's w), so Limit per Window is
	// its rate; 0 when the server did not say.
	Window time.Duration
	// Policies are the limits the server describes (RateLimit-Policy, or
	// RateLimit-Limit's policies), each a quota per window.
	Policies []RatePolicy
	// Fields names the header family read: "RateLimit", "RateLimit-*" or
	// "X-RateLimit-*".
	Fields string
}

// RatePolicy is one limit a server describes: Quota requests per Window.
type RatePolicy struct {
	Name   string // draft 08's policy name; "" in the earlier forms
	Quota  int64
	Window time.Duration
}

// Rate is the limit's rate in requests per second, when Limit and Window
// are both known; 0 otherwise.
func (r *RateInfo) Rate() float64 {
	if r == nil || r.Limit <= 0 || r.Window <= 0 {
		return 0
	}
	return float64(r.Limit) / r.Window.Seconds()
}

// WithRateInfo fills info with the rate-limit headers of the call's final
// answer, a success or an error (an error's are also in APIError.RateLimit).
// It is left zero when the answer carried none.
func WithRateInfo(info *RateInfo) RequestOption {
	return func(o *requestOptions) error {
		o.rateInfo = info
		return nil
	}
}

// unixEpochCutoff tells a Unix time from delay-seconds in X-RateLimit-Reset:
// no window is 31 years long.
const unixEpochCutoff = 1_000_000_000

// parseRateInfo reads a response's rate-limit headers; nil when it has none.
func parseRateInfo(h http.Header, now time.Time) *RateInfo {
	if v := h.Get("RateLimit"); v != "" {
		if r := parseStructured(v, h.Get("RateLimit-Policy")); r != nil {
			return r
		}
	}
	if r := parseFields(h, "RateLimit-", now, false); r != nil {
		r.Fields = "RateLimit-*"
		return r
	}
	if r := parseFields(h, "X-RateLimit-", now, true); r != nil {
		r.Fields = "X-RateLimit-*"
		return r
	}
	return nil
}

// sfItem is one member of a structured-field list or dictionary: a bare
// value (a token, string or integer) and its parameters.
type sfItem struct {
	key    string // dictionary key, "" in a list
	value  string
	params map[string]string
}

// parseSF reads a structured-field list or dictionary loosely: members by
// commas, parameters by semicolons, quotes stripped. Servers differ in
// spacing and quoting more than the drafts allow; what matters is the
// numbers.
func parseSF(v string) []sfItem {
	var out []sfItem
	for member := range strings.SplitSeq(v, ",") {
		parts := strings.Split(member, ";")
		it := sfItem{params: map[string]string{}}
		head := strings.TrimSpace(parts[0])
		if k, val, ok := strings.Cut(head, "="); ok && !strings.HasPrefix(head, `"`) {
			it.key, head = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(val)
		}
		it.value = strings.Trim(head, `"`)
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			it.params[strings.ToLower(strings.TrimSpace(k))] = strings.Trim(strings.TrimSpace(val), `"`)
		}
		out = append(out, it)
	}
	return out
}

func atoi(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil && n >= 0
}

// parsePolicies reads policies: draft 08's "name";q=10;w=1 items, or the
// earlier 10;w=1 items.
func parsePolicies(v string) []RatePolicy {
	var out []RatePolicy
	for _, it := range parseSF(v) {
		p := RatePolicy{}
		if q, ok := atoi(it.params["q"]); ok {
			p.Name, p.Quota = it.value, q
		} else if q, ok := atoi(it.value); ok {
			p.Quota = q
		} else {
			continue
		}
		if w, ok := atoi(it.params["w"]); ok {
			p.Window = time.Duration(w) * time.Second
		}
		out = append(out, p)
	}
	return out
}

// parseStructured reads RateLimit (draft 07's dictionary or draft 08's
// list) with RateLimit-Policy.
func parseStructured(v, policy string) *RateInfo {
	r := &RateInfo{Fields: "RateLimit", Policies: parsePolicies(policy)}
	found := false
	name := ""
	for _, it := range parseSF(v) {
		switch it.key {
		case "limit":
			r.Limit, found = mustAtoi(it.value), true
		case "remaining":
			r.Remaining, r.HasRemaining, found = mustAtoi(it.value), true, true
		case "reset":
			r.Reset, found = time.Duration(mustAtoi(it.value))*time.Second, true
		case "":
			rem, ok := atoi(it.params["r"])
			if !ok || (r.HasRemaining && rem >= r.Remaining) {
				continue
			}
			r.Remaining, r.HasRemaining, found, name = rem, true, true, it.value
			if t, ok := atoi(it.params["t"]); ok {
				r.Reset = time.Duration(t) * time.Second
			}
		}
	}
	if !found {
		return nil
	}
	r.fromPolicies(name)
	return r
}

func mustAtoi(s string) int64 { n, _ := atoi(s); return n }

// fromPolicies takes the reported limit's quota and window from its policy:
// the one named, else the one whose quota is Limit, else the only one.
func (r *RateInfo) fromPolicies(name string) {
	for _, p := range r.Policies {
		if (name != "" && p.Name == name) || (name == "" && r.Limit > 0 && p.Quota == r.Limit && p.Window > 0) || len(r.Policies) == 1 {
			if r.Limit == 0 {
				r.Limit = p.Quota
			}
			r.Window = p.Window
			return
		}
	}
}

// parseFields reads PREFIX-Limit, -Remaining and -Reset.
func parseFields(h http.Header, prefix string, now time.Time, epochReset bool) *RateInfo {
	limit, rem, reset := h.Get(prefix+"Limit"), h.Get(prefix+"Remaining"), h.Get(prefix+"Reset")
	if limit == "" && rem == "" && reset == "" {
		return nil
	}
	r := &RateInfo{}
	if limit != "" {
		// Draft 03: "10, 10;w=1, 1000;w=3600": the limit, then policies.
		first, rest, _ := strings.Cut(limit, ",")
		r.Limit = mustAtoi(strings.Split(first, ";")[0])
		r.Policies = parsePolicies(limit)
		if rest == "" && !strings.Contains(first, ";") {
			r.Policies = nil
		}
	}
	if p := h.Get(prefix + "Policy"); p != "" {
		r.Policies = parsePolicies(p)
	}
	if n, ok := atoi(rem); ok {
		r.Remaining, r.HasRemaining = n, true
	}
	if n, ok := atoi(reset); ok {
		switch {
		case epochReset && n >= unixEpochCutoff*1000:
			r.Reset = max(0, time.UnixMilli(n).Sub(now))
		case epochReset && n >= unixEpochCutoff:
			r.Reset = max(0, time.Unix(n, 0).Sub(now))
		default:
			r.Reset = time.Duration(n) * time.Second
		}
	}
	r.fromPolicies("")
	return r
}

// QuotaExhausted reports whether err is the API saying a quota of the key
// (a daily or monthly sending quota, not the rate) is used up, and which:
// "day" or "month". It knows it by a 429 whose code or message names a
// quota (daily_quota_exceeded, "daily sending limit"), or whose rate
// headers describe a limit of a day or longer with nothing remaining.
func QuotaExhausted(err error) (per string, ok bool) {
	var e *APIError
	if !errors.As(err, &e) || !IsRateLimited(e) {
		return "", false
	}
	text := strings.ToLower(e.Code + " " + e.Message)
	if strings.Contains(text, "quota") || strings.Contains(text, "daily") || strings.Contains(text, "monthly") {
		if strings.Contains(text, "month") {
			return "month", true
		}
		return "day", true
	}
	if r := e.RateLimit; r != nil && r.HasRemaining && r.Remaining == 0 && r.Window >= 24*time.Hour {
		if r.Window >= 28*24*time.Hour {
			return "month", true
		}
		return "day", true
	}
	return "", false
}
