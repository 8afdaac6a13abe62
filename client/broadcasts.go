package client

import (
	"context"
	"encoding/json"
	"time"
)

// BroadcastsService is the broadcasts resource: c.Broadcasts.
type BroadcastsService struct{ c *Client }

// Broadcast statuses.
const (
	BroadcastScheduled = "scheduled"
	BroadcastQueued    = "queued"
	BroadcastSending   = "sending"
	BroadcastSent      = "sent"
	BroadcastCancelled = "cancelled"
	BroadcastFailed    = "failed"
)

// Broadcast is a broadcast as the API returns it; Raw has the whole body.
type Broadcast struct {
	// ID is the broadcast's id.
	ID string `json:"id"`
	// Status is one of the Broadcast* constants.
	Status string `json:"status"`
	// Replayed is true when a send was answered from the idempotency record.
	Replayed bool `json:"replayed,omitempty"`
	// AudienceID and AudienceIDs name the audiences it goes to.
	AudienceID  string   `json:"audienceId,omitempty"`
	AudienceIDs []string `json:"audienceIds,omitempty"`
	// Subject is the subject line.
	Subject string `json:"subject,omitempty"`
	// ScheduledAt and CreatedAt are nil when absent or not RFC 3339.
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	CreatedAt   *time.Time `json:"createdAt,omitempty"`
	// Raw is the JSON this Broadcast was decoded from.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes leniently, keeping the body in Raw.
func (b *Broadcast) UnmarshalJSON(data []byte) error {
	m, raw := decodeResponse(data)
	*b = Broadcast{
		ID:          field[string](m, "id"),
		Status:      field[string](m, "status"),
		Replayed:    field[bool](m, "replayed"),
		AudienceID:  field[string](m, "audienceId"),
		AudienceIDs: field[Recipients](m, "audienceIds"),
		Subject:     field[string](m, "subject"),
		ScheduledAt: field[*time.Time](m, "scheduledAt"),
		CreatedAt:   field[*time.Time](m, "createdAt"),
		Raw:         raw,
	}
	return nil
}

// Send creates and sends (or schedules) a broadcast (POST /broadcasts; there
// is no separate create). It carries an Idempotency-Key, reused by retries.
func (s *BroadcastsService) Send(ctx context.Context, params *BroadcastParams, opts ...RequestOption) (*Broadcast, error) {
	body, err := encode("Broadcasts.Send", params)
	if err != nil {
		return nil, err
	}
	return s.SendJSON(ctx, body, opts...)
}

// SendJSON is Send for a body already held as JSON, normalised as in
// EmailsService.SendJSON.
func (s *BroadcastsService) SendJSON(ctx context.Context, body json.RawMessage, opts ...RequestOption) (*Broadcast, error) {
	return send[Broadcast](ctx, s.c, "broadcasts.send", "/broadcasts", body, opts)
}

// Get reads one broadcast (GET /broadcasts/:id).
func (s *BroadcastsService) Get(ctx context.Context, id string) (*Broadcast, error) {
	return onID[Broadcast](ctx, s.c, "broadcasts.get", methodGet, "/broadcasts", id, "", nil)
}

// Cancel cancels a scheduled broadcast (POST /broadcasts/:id/cancel, no
// body). It is retried; it carries no idempotency key.
func (s *BroadcastsService) Cancel(ctx context.Context, id string) (*Broadcast, error) {
	return onID[Broadcast](ctx, s.c, "broadcasts.cancel", methodPost, "/broadcasts", id, "/cancel", nil)
}
