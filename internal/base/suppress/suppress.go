// Package suppress holds the address rule, the normal form in which the
// suppression list matches a recipient (Address, and sendonce_address in
// SQL), and takes suppressed recipients out of an intent's request body.
// The suppression list itself is SQL (sendonce_suppression and
// sendonce_address in the migrations); Strip is the body rewrite the
// worker applies before every attempt, the same way each time, so the body
// sent under an intent's key never changes.
package suppress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// legacyAngle and legacyAddress are the normal form before migration
// 00013 (the bare address of "Name <addr>", trimmed of spaces, in lower
// case). Strip still matches by it, so that an intent claimed under that
// rule, whose suppressed recipients it found, sends the same body on its
// retries after the upgrade: for every spelling Address takes, the two
// agree, so it takes out nothing more from an intent enqueued since.
var legacyAngle = regexp.MustCompile(`<([^<>]*)>\s*$`)

func legacyAddress(a string) string {
	if m := legacyAngle.FindStringSubmatch(a); m != nil {
		a = m[1]
	}
	return strings.ToLower(strings.Trim(a, " "))
}

// Strip returns body without the suppressed recipients, for an intent of
// kind ("email", "template" or "batch"; any other kind is returned as it
// is). An email whose "to" is left empty cannot be sent: for an email or
// template that makes none true; a batch drops such emails, and none is
// true when no email is left.
func Strip(kind string, body json.RawMessage, suppressed []string) (out json.RawMessage, none bool, err error) {
	if len(suppressed) == 0 {
		return body, false, nil
	}
	set := make(map[string]bool, len(suppressed))
	for _, a := range suppressed {
		if a != "" {
			set[a] = true // a normal form, as the claim's lookup found it
		}
	}
	switch kind {
	case "email", "template":
		e, ok, err := stripEmail(body, set)
		if err != nil {
			return nil, false, err
		}
		return e, !ok, nil
	case "batch":
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			return nil, false, fmt.Errorf("suppress: batch body: %w", err)
		}
		var emails []json.RawMessage
		if err := json.Unmarshal(top["emails"], &emails); err != nil {
			return nil, false, fmt.Errorf("suppress: batch emails: %w", err)
		}
		kept := emails[:0]
		for _, e := range emails {
			e, ok, err := stripEmail(e, set)
			if err != nil {
				return nil, false, err
			}
			if ok {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			return nil, true, nil
		}
		if top["emails"], err = json.Marshal(kept); err != nil {
			return nil, false, err
		}
		out, err := marshal(top)
		return out, false, err
	}
	return body, false, nil
}

// stripEmail removes the suppressed addresses from to, cc and bcc; ok is
// false when no "to" is left. A field left empty is removed (cc, bcc).
func stripEmail(body json.RawMessage, set map[string]bool) (json.RawMessage, bool, error) {
	var e map[string]json.RawMessage
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, false, fmt.Errorf("suppress: email body: %w", err)
	}
	for _, field := range []string{"to", "cc", "bcc"} {
		raw, ok := e[field]
		if !ok || bytes.Equal(raw, []byte("null")) {
			continue
		}
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			var one string
			if err := json.Unmarshal(raw, &one); err != nil {
				continue // not addresses: the API judges it
			}
			list = []string{one}
		}
		kept := slices.DeleteFunc(list, func(a string) bool { return set[Address(a)] || set[legacyAddress(a)] })
		if len(kept) == 0 {
			delete(e, field)
			continue
		}
		b, err := json.Marshal(kept)
		if err != nil {
			return nil, false, err
		}
		e[field] = b
	}
	if _, ok := e["to"]; !ok {
		return nil, false, nil
	}
	out, err := marshal(e)
	return out, true, err
}

// marshal encodes m without HTML escaping, so the rest of the body keeps
// its characters.
func marshal(m map[string]json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
