package store

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Intent is a row of sendonce_outbox as a read or a claim returns it. A
// claim reads fewer columns than a read: the others stay zero. Kind, State
// and DeliveryStatus are the columns' strings; package outbox turns an
// Intent into its Record.
type Intent struct {
	ID                   int64
	Key                  string
	Kind                 string
	Payload              json.RawMessage
	TemplateID           string
	SendAt               *time.Time
	State                string
	Attempts             int
	MessageID            string
	Replayed             bool
	LastError            string
	JobID                *int64
	FirstAttemptAt       *time.Time
	Uncertain            bool
	Snoozes              int
	APIKeyFingerprint    string
	ForcedRetryAt        *time.Time
	ClaimedBy            *int32
	BatchKey             string
	DeliveryStatus       string
	DeliveryStatusAt     *time.Time
	SuppressedRecipients []string
	TraceParent          string
	TraceState           string
	Topic                string
	ListUnsubscribe      json.RawMessage
	Tenant               string
	PrunedAt             *time.Time
	CreatedAt            time.Time
	UpdatedAt            time.Time
	SentAt               *time.Time
}

// IntentColumns is the select list of a whole intent that ScanIntent
// reads, in order.
const IntentColumns = `id, idempotency_key, kind, payload, coalesce(template_id, ''), send_at, state, attempts,
	coalesce(message_id, ''), replayed, coalesce(last_error, ''), job_id, first_attempt_at,
	created_at, updated_at, sent_at, uncertain, snoozes, coalesce(api_key_fingerprint, ''), forced_retry_at, claimed_by,
	coalesce(batch_key, ''), coalesce(delivery_status, ''), delivery_status_at, suppressed_recipients,
	coalesce(traceparent, ''), coalesce(tracestate, ''), coalesce(topic, ''), list_unsubscribe,
	coalesce(tenant, '')`

// ScanIntent scans a row of IntentColumns (and extra after them) into an
// Intent. The kind, state and delivery status are scanned as strings (as
// Intent holds them): into named string types pgx converts each value by
// reflection, which cost a tenth of the Go time of an EnqueueMany of 1,000
// in package outbox, whose Record has such types.
func ScanIntent(row pgx.Row, extra ...any) (*Intent, error) {
	r := &Intent{}
	dest := []any{&r.ID, &r.Key, &r.Kind, &r.Payload, &r.TemplateID, &r.SendAt, &r.State, &r.Attempts,
		&r.MessageID, &r.Replayed, &r.LastError, &r.JobID, &r.FirstAttemptAt,
		&r.CreatedAt, &r.UpdatedAt, &r.SentAt, &r.Uncertain, &r.Snoozes, &r.APIKeyFingerprint, &r.ForcedRetryAt, &r.ClaimedBy,
		&r.BatchKey, &r.DeliveryStatus, &r.DeliveryStatusAt, &r.SuppressedRecipients, &r.TraceParent, &r.TraceState,
		&r.Topic, &r.ListUnsubscribe, &r.Tenant}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	return r, nil
}
