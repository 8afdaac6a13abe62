package unsub

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sendonce/sendonce/internal/base/suppress"
)

// Freeze computes the headers of an intent of kind ("email", "template"
// or "batch") with a topic: for an email or template, one object of
// headers, for the first "to" recipient not in skip (the suppressed ones);
// for a batch, an array of one object per email. The result is stored
// with the intent before its first attempt and given to Attach on every
// attempt, so every attempt sends the same bytes, whatever the secret is
// by then.
func (s *Signer) Freeze(kind string, payload json.RawMessage, topic string, skip []string) (json.RawMessage, error) {
	switch kind {
	case "email", "template":
		return json.Marshal(s.Headers(firstTo(payload, skip), topic))
	case "batch":
		var top struct {
			Emails []json.RawMessage `json:"emails"`
		}
		if err := json.Unmarshal(payload, &top); err != nil {
			return nil, fmt.Errorf("unsub: batch body: %w", err)
		}
		all := make([]map[string]string, len(top.Emails))
		for i, e := range top.Emails {
			all[i] = s.Headers(firstTo(e, skip), topic)
		}
		return json.Marshal(all)
	}
	return nil, fmt.Errorf("unsub: an intent of kind %q carries no unsubscribe headers", kind)
}

// firstTo is the normal form of an email's first "to" recipient not in
// skip (or the first, when all are).
func firstTo(email json.RawMessage, skip []string) string {
	var body struct {
		To json.RawMessage `json:"to"`
	}
	_ = json.Unmarshal(email, &body)
	var one string
	var many []string
	if json.Unmarshal(body.To, &one) == nil {
		many = []string{one}
	} else {
		_ = json.Unmarshal(body.To, &many)
	}
	first := ""
	for _, a := range many {
		n := suppress.Address(a)
		if first == "" {
			first = n
		}
		if n != "" && !slices.Contains(skip, n) {
			return n
		}
	}
	return first
}

// Attach returns the payload with the frozen headers (Freeze's result)
// merged into its emails' "headers". A batch's emails are matched by
// position, so Attach is given the payload the headers were frozen from,
// before suppressed recipients are taken out of it.
func Attach(kind string, payload, frozen json.RawMessage) (json.RawMessage, error) {
	switch kind {
	case "email", "template":
		var h map[string]string
		if err := json.Unmarshal(frozen, &h); err != nil {
			return nil, fmt.Errorf("unsub: frozen headers: %w", err)
		}
		return Merge(payload, h)
	case "batch":
		var hs []map[string]string
		if err := json.Unmarshal(frozen, &hs); err != nil {
			return nil, fmt.Errorf("unsub: frozen headers: %w", err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(payload, &top); err != nil {
			return nil, fmt.Errorf("unsub: batch body: %w", err)
		}
		var emails []json.RawMessage
		if err := json.Unmarshal(top["emails"], &emails); err != nil {
			return nil, fmt.Errorf("unsub: batch emails: %w", err)
		}
		if len(emails) != len(hs) {
			return nil, fmt.Errorf("unsub: %d frozen headers for %d emails", len(hs), len(emails))
		}
		for i := range emails {
			e, err := Merge(emails[i], hs[i])
			if err != nil {
				return nil, err
			}
			emails[i] = e
		}
		b, err := json.Marshal(emails)
		if err != nil {
			return nil, err
		}
		top["emails"] = b
		return json.Marshal(top)
	}
	return payload, nil
}
