package client

import (
	"context"
	"encoding/json"
	"fmt"
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
	m := fieldsOf(data)
	*b = Broadcast{
		ID:          getString(m, "id"),
		Status:      getString(m, "status"),
		AudienceID:  getString(m, "audienceId"),
		AudienceIDs: getStrings(m, "audienceIds"),
		Subject:     getString(m, "subject"),
		ScheduledAt: getTime(m, "scheduledAt"),
		CreatedAt:   getTime(m, "createdAt"),
		Raw:         cloneRaw(data),
	}
	b.Replayed, _ = getBool(m, "replayed")
	return nil
}

// Send creates and sends (or schedules) a broadcast (POST /broadcasts; there
// is no separate create). It carries an Idempotency-Key, reused by retries.
func (s *BroadcastsService) Send(ctx context.Context, params *BroadcastParams, opts ...RequestOption) (*Broadcast, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: Broadcasts.Send: nil params", ErrInvalidRequest)
	}
	var b Broadcast
	err := s.c.do(ctx, &request{call: "broadcasts.send", method: methodPost, path: "/broadcasts", body: params, send: true, opts: opts}, &b)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// Get reads one broadcast (GET /broadcasts/:id).
func (s *BroadcastsService) Get(ctx context.Context, id string) (*Broadcast, error) {
	return s.broadcast(ctx, "broadcasts.get", methodGet, id, "")
}

// Cancel cancels a scheduled broadcast (POST /broadcasts/:id/cancel, no
// body). It is retried; it carries no idempotency key.
func (s *BroadcastsService) Cancel(ctx context.Context, id string) (*Broadcast, error) {
	return s.broadcast(ctx, "broadcasts.cancel", methodPost, id, "/cancel")
}

func (s *BroadcastsService) broadcast(ctx context.Context, call, method, id, suffix string) (*Broadcast, error) {
	seg, err := escapeID(id)
	if err != nil {
		return nil, err
	}
	var b Broadcast
	if err := s.c.do(ctx, &request{call: call, method: method, path: "/broadcasts/" + seg + suffix}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
