// Package status is what a status hook is told of: the transitions of
// intents, as package outbox exports them (outbox.Status, outbox.StatusHook)
// and the packages below it (webhook, sendstate) report them. See
// migrations/sql/00032_status.sql for the capture they are read from.
package status

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
)

// Transition is a move of an intent that a status hook is told of: into
// a final state of its send (sent, failed, suppressed, canceled), or into
// a delivery status the API's webhooks reported (delivered, bounced,
// complained).
type Transition string

// The transitions a Hook is told of.
const (
	Sent       Transition = "sent"
	Failed     Transition = "failed"
	Suppressed Transition = "suppressed"
	Canceled   Transition = "canceled"
	Delivered  Transition = "delivered"
	Bounced    Transition = "bounced"
	Complained Transition = "complained"
)

// Status is one transition of one intent, as a Hook is told of it.
type Status struct {
	Transition Transition
	// Key is the intent's idempotency key.
	Key string
	// Kind is the intent's kind (outbox.Kind's values: email, batch,
	// template, broadcast).
	Kind   string
	RunKey string // "" outside a run
	Tenant string // "" for the default tenant
	// Tags are the email's tags (the payload's "tags" object), the
	// intent's metadata; nil when it has none.
	Tags map[string]string
	// MessageID is the API's id of the email, once it was sent.
	MessageID string
}

// Hook is called with the transaction that records transitions of
// intents, before it commits (see outbox.StatusHook).
type Hook func(ctx context.Context, tx pgx.Tx, statuses []Status) error

// Of is the status of a transition to t of a row; tags that are not a JSON
// object of strings are left out.
func Of(t Transition, key, kind, runKey, tenant, messageID string, tags []byte) Status {
	s := Status{Transition: t, Key: key, Kind: kind, RunKey: runKey, Tenant: tenant, MessageID: messageID}
	if len(tags) > 0 {
		var m map[string]string
		if json.Unmarshal(tags, &m) == nil {
			s.Tags = m
		}
	}
	return s
}

// Parse reads the transitions a capture collected: a JSON array of
// sendonce_status (empty: none).
func Parse(raw []byte) ([]Status, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var rows []struct {
		Transition string          `json:"transition"`
		Key        string          `json:"idempotency_key"`
		Kind       string          `json:"kind"`
		RunKey     *string         `json:"run_key"`
		Tenant     string          `json:"tenant"`
		Tags       json.RawMessage `json:"tags"`
		MessageID  string          `json:"message_id"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("status: read the captured transitions: %w", err)
	}
	out := make([]Status, len(rows))
	for i, r := range rows {
		run := ""
		if r.RunKey != nil {
			run = *r.RunKey
		}
		var tags []byte
		if len(r.Tags) > 0 && string(r.Tags) != "null" {
			tags = r.Tags
		}
		out[i] = Of(Transition(r.Transition), r.Key, r.Kind, run, r.Tenant, r.MessageID, tags)
	}
	return out, nil
}

// Capture runs record, whose statements run in the transaction db is,
// with the capture of transitions on (store.CaptureStatuses), and returns
// the transitions they recorded.
func Capture(ctx context.Context, db store.DB, record func() error) ([]Status, error) {
	if err := store.CaptureStatuses(ctx, db); err != nil {
		return nil, fmt.Errorf("capture statuses: %w", err)
	}
	if err := record(); err != nil {
		return nil, err
	}
	raw, err := store.CapturedStatuses(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read captured statuses: %w", err)
	}
	return Parse(raw)
}
