package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// This file is what the four sends share: their bodies go through
// normaliseSendBody, and each is a repeatable POST that carries an
// Idempotency-Key.

// instantLayout is how the API wants instants: UTC, milliseconds, Z.
const instantLayout = "2006-01-02T15:04:05.000Z"

// formatInstant renders t as the API expects.
func formatInstant(t time.Time) string { return t.UTC().Format(instantLayout) }

// normaliseSendBody applies the contract's wire rules to the JSON body of a
// send (openemail-api.md §2.2, §2.3), whether the body was encoded from
// params or stored earlier as JSON: a single-string to, cc or bcc becomes a
// one-element array, an RFC 3339 scheduledAt is sent in UTC with
// milliseconds, and "attachments": null is left out. For emails.send_batch
// the rules apply to each of {"emails": [...]}. Everything else passes
// through untouched; the API judges it.
//
// The output is deterministic (object keys sorted), so a retry, or a later
// attempt after a crash, sends the same bytes under the same key.
func normaliseSendBody(call string, body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%w: %s body must be a JSON object", ErrInvalidRequest, call)
	}
	if call != "emails.send_batch" {
		normaliseEmail(m)
		return json.Marshal(m)
	}
	var emails []map[string]json.RawMessage
	if json.Unmarshal(m["emails"], &emails) == nil && emails != nil {
		for _, e := range emails {
			normaliseEmail(e)
		}
		m["emails"], _ = json.Marshal(emails)
	}
	return json.Marshal(m)
}

func normaliseEmail(m map[string]json.RawMessage) {
	if m == nil {
		return
	}
	for _, k := range []string{"to", "cc", "bcc"} {
		if raw := m[k]; len(raw) > 0 && raw[0] == '"' {
			m[k] = json.RawMessage("[" + string(raw) + "]")
		}
	}
	var at string
	if json.Unmarshal(m["scheduledAt"], &at) == nil {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			m["scheduledAt"], _ = json.Marshal(formatInstant(t))
		}
	}
	if string(m["attachments"]) == "null" {
		delete(m, "attachments")
	}
}

// send makes one of the four sends: a repeatable POST of body, normalised,
// with an Idempotency-Key made once for the call (or the caller's) and kept
// by every retry, so a retry replays instead of sending again.
func send[T any](ctx context.Context, c *Client, call, path string, body []byte, opts []RequestOption) (*T, error) {
	body, err := normaliseSendBody(call, body)
	if err != nil {
		return nil, err
	}
	return result[T](ctx, c, &request{call: call, method: methodPost, path: path, body: json.RawMessage(body), send: true, opts: opts})
}

// encode marshals the params of a typed send, refusing nil.
func encode[P any](method string, params *P) ([]byte, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: %s: nil params", ErrInvalidRequest, method)
	}
	body, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRequest, method, err)
	}
	return body, nil
}
