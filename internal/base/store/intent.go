package store

import (
	"encoding/json"
	"time"
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
	PrunedAt             *time.Time
	CreatedAt            time.Time
	UpdatedAt            time.Time
	SentAt               *time.Time
}
