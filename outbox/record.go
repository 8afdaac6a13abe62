package outbox

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
)

// State is where an intent stands.
type State string

// The states of an intent. pending → sending → sent is the usual path;
// failed, canceled and suppressed are terminal until an operator retries a
// failed or suppressed one.
const (
	StatePending  State = "pending"  // waiting for a worker (or for its send time)
	StateSending  State = "sending"  // a worker is sending it, or crashed while sending
	StateSent     State = "sent"     // the API accepted it (fresh or replayed)
	StateFailed   State = "failed"   // given up; see LastError
	StateCanceled State = "canceled" // canceled before any send was attempted
	// StateSuppressed: not sent, because every recipient is on the
	// suppression list (see Outbox.Suppress); no API call was made.
	StateSuppressed State = "suppressed"
)

// States lists every state in lifecycle order.
var States = []State{StatePending, StateSending, StateSent, StateFailed, StateCanceled, StateSuppressed}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	return slices.Contains(States, s)
}

// Record is an intent as stored in sendonce_outbox.
type Record struct {
	ID             int64           `json:"id"`
	Key            string          `json:"idempotencyKey"`
	Kind           Kind            `json:"kind"`
	Payload        json.RawMessage `json:"payload"`
	TemplateID     string          `json:"templateId,omitempty"`
	SendAt         *time.Time      `json:"sendAt,omitempty"`
	State          State           `json:"state"`
	Attempts       int             `json:"attempts"`
	MessageID      string          `json:"messageId,omitempty"`
	Replayed       bool            `json:"replayed"`
	LastError      string          `json:"lastError,omitempty"`
	JobID          *int64          `json:"jobId,omitempty"`
	FirstAttemptAt *time.Time      `json:"firstAttemptAt,omitempty"`
	// Uncertain is true when some attempt's outcome is unknown (a network
	// error, a 5xx, a timeout, a crash): the API may hold a delivery under
	// the key, so a send after the API's idempotency window could be a
	// second delivery.
	Uncertain bool `json:"uncertain"`
	// Snoozes counts the rate-limit snoozes since the last retry.
	Snoozes int `json:"snoozes"`
	// APIKeyFingerprint identifies (without revealing it) the API key the
	// attempts were made with.
	APIKeyFingerprint string `json:"apiKeyFingerprint,omitempty"`
	// ForcedRetryAt is when an operator last retried the intent with force,
	// accepting a possible second delivery.
	ForcedRetryAt *time.Time `json:"forcedRetryAt,omitempty"`
	// ClaimedBy is the lease epoch (sendonce_worker.epoch) of the worker
	// instance that claimed the intent last.
	ClaimedBy *int32 `json:"claimedBy,omitempty"`
	// BatchKey is the key of the coalesced batch request the intent is
	// bound to, or went out in (see worker.Config.Coalesce); empty when
	// it is sent alone.
	BatchKey string `json:"batchKey,omitempty"`
	// DeliveryStatus is what the API's delivery webhooks last said of the
	// message, by the precedence of DeliveryStatuses; empty until one did.
	DeliveryStatus DeliveryStatus `json:"deliveryStatus,omitempty"`
	// DeliveryStatusAt is the time of the event that gave DeliveryStatus.
	DeliveryStatusAt *time.Time `json:"deliveryStatusAt,omitempty"`
	// SuppressedRecipients are the recipients found on the suppression list
	// when the intent was first claimed: every attempt sends without them
	// (or, all of them, the intent is suppressed).
	SuppressedRecipients []string `json:"suppressedRecipients,omitempty"`
	// TraceParent is the W3C traceparent of the span the intent was
	// enqueued in, and TraceState its tracestate; empty when there was
	// none. The worker's send span links to it (see docs/tracing-and-metrics.md).
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Topic is the intent's topic (Intent.Topic, or its run's); empty for
	// a transactional send.
	Topic string `json:"topic,omitempty"`
	// ListUnsubscribe holds the List-Unsubscribe headers the first claim
	// of an intent with a topic froze (an object; for a batch, an array of
	// one per email), sent with every attempt; nil until then.
	ListUnsubscribe json.RawMessage `json:"listUnsubscribe,omitempty"`
	// Tenant is the intent's tenant (Intent.Tenant, or its run's); empty
	// for the default tenant (DefaultTenant).
	Tenant string `json:"tenant,omitempty"`
	// PrunedAt is set only on the Record of an EnqueueResult whose key
	// names an intent pruned by retention (sendonce prune): when it was
	// pruned. Such a Record has no ID, job or times; its State is the
	// pruned intent's final state.
	PrunedAt  *time.Time `json:"prunedAt,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	SentAt    *time.Time `json:"sentAt,omitempty"`
}

// record is the Record of a row package store read (store.ScanIntent): a
// copy of its fields. Kind, state and delivery status come as strings
// (store scans them so) and are converted here: scanned into their named
// string types pgx converts each value by reflection, a tenth of the Go
// time of an EnqueueMany of 1,000. A plain field copy, no reflection: an
// EnqueueMany of 1,000 stored keys returns 1,000 of them, each one
// allocation here beside the Intent store scanned.
func record(in *store.Intent) *Record {
	return &Record{ID: in.ID, Key: in.Key, Kind: Kind(in.Kind), Payload: in.Payload, TemplateID: in.TemplateID,
		SendAt: in.SendAt, State: State(in.State), Attempts: in.Attempts, MessageID: in.MessageID, Replayed: in.Replayed,
		LastError: in.LastError, JobID: in.JobID, FirstAttemptAt: in.FirstAttemptAt, Uncertain: in.Uncertain,
		Snoozes: in.Snoozes, APIKeyFingerprint: in.APIKeyFingerprint, ForcedRetryAt: in.ForcedRetryAt,
		ClaimedBy: in.ClaimedBy, BatchKey: in.BatchKey, DeliveryStatus: DeliveryStatus(in.DeliveryStatus),
		DeliveryStatusAt: in.DeliveryStatusAt, SuppressedRecipients: in.SuppressedRecipients,
		TraceParent: in.TraceParent, TraceState: in.TraceState, Topic: in.Topic, ListUnsubscribe: in.ListUnsubscribe, Tenant: in.Tenant,
		PrunedAt: in.PrunedAt, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, SentAt: in.SentAt}
}

// recordOf is record of what a store function returned: the error as it
// is (nil Record) when there is one.
func recordOf(in *store.Intent, err error) (*Record, error) {
	if err != nil {
		return nil, err
	}
	return record(in), nil
}
