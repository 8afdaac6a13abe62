package fakeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"
)

// Delivery is one message the fake actually sent: the ledger entry an
// exactly-once test counts. A batch makes one Delivery per email it sent (an
// email a reject fault refused makes none); a scheduled send makes its
// Delivery when it falls due, never if it was cancelled.
type Delivery struct {
	MessageID      string    `json:"messageId"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	Kind           Kind      `json:"kind"`
	To             []string  `json:"to"` // for a broadcast: its audience ids
	Cc             []string  `json:"cc,omitempty"`
	Bcc            []string  `json:"bcc,omitempty"`
	From           string    `json:"from"`
	Subject        string    `json:"subject,omitempty"`
	TemplateID     string    `json:"templateId,omitempty"`
	DeliveredAt    time.Time `json:"deliveredAt"`
	RequestID      string    `json:"requestId"` // of the request that created the message
	// Payload is the email (or broadcast) body as received, in canonical JSON
	// (sorted keys), for tests that check what a client put on the wire.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// RequestRecord is one API request the fake received (control requests under
// /_fake/ are not recorded). It is added on arrival; Status and AnsweredAt are
// set when the request ends.
type RequestRecord struct {
	RequestID      string    `json:"requestId"`
	ReceivedAt     time.Time `json:"receivedAt"`
	AnsweredAt     time.Time `json:"answeredAt"` // zero while in flight
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	Query          string    `json:"query,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	KeyPrefix      string    `json:"keyPrefix,omitempty"` // "oe_test_…" or "oe_live_…", never the key
	// Status is the status answered: 0 while in flight or when the connection
	// was dropped (Dropped), 499 when the client went away first.
	Status     int    `json:"status"`
	Dropped    bool   `json:"dropped,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"` // answered from a stored idempotency key
	Fault      string `json:"fault,omitempty"`    // the fault rules that fired, comma-separated
	RetryAfter string `json:"retryAfter,omitempty"`
	// RateLimited is set when the rate limiter (Config.Rate) answered 429;
	// an injected rate_limit or retry_after fault shows in Fault instead.
	RateLimited bool `json:"rateLimited,omitempty"`
	// Rejected counts the emails of the request a reject fault refused: a
	// batch's failed items, or 1 for a single send answered 422. A replay
	// refuses nothing anew, so it is 0 there.
	Rejected int `json:"rejected,omitempty"`
}

// Deliveries returns the ledger in delivery order. It first promotes
// scheduled sends that are due.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.promoteDueLocked(s.now())
	return slices.Clone(s.deliveries)
}

// DeliveriesTo returns the deliveries with addr among their to, cc or bcc
// addresses (compared case-insensitively, display names ignored).
func (s *Server) DeliveriesTo(addr string) []Delivery {
	var out []Delivery
	for _, d := range s.Deliveries() {
		if d.sentTo(addr) {
			out = append(out, d)
		}
	}
	return out
}

func (d Delivery) sentTo(addr string) bool {
	want := bareAddress(addr)
	for _, list := range [][]string{d.To, d.Cc, d.Bcc} {
		for _, a := range list {
			if strings.EqualFold(bareAddress(a), want) {
				return true
			}
		}
	}
	return false
}

// bareAddress strips a display name: "Ann <ann@x.io>" is "ann@x.io".
func bareAddress(s string) string {
	if a, err := mail.ParseAddress(s); err == nil {
		return a.Address
	}
	return strings.TrimSpace(s)
}

// Requests returns the request log in arrival order.
func (s *Server) Requests() []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RequestRecord, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// RequestSpan returns the arrival times of the earliest and the latest
// request in the log: the span over which a client used the API (zero
// times when the log is empty).
func (s *Server) RequestSpan() (first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.requests {
		if i == 0 || r.ReceivedAt.Before(first) {
			first = r.ReceivedAt
		}
		if r.ReceivedAt.After(last) {
			last = r.ReceivedAt
		}
	}
	return first, last
}

// WaitDeliveries blocks until the ledger holds at least n deliveries, ctx
// ends, or the server closes.
func (s *Server) WaitDeliveries(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() (int, bool) {
		s.promoteDueLocked(s.now())
		return len(s.deliveries), len(s.deliveries) >= n
	}, fmt.Sprintf("%d deliveries", n))
}

// WaitRequests blocks until at least n recorded requests have ended
// (answered, dropped or abandoned by their client), ctx ends, or the server
// closes.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() (int, bool) {
		ended := 0
		for _, r := range s.requests {
			if !r.AnsweredAt.IsZero() {
				ended++
			}
		}
		return ended, ended >= n
	}, fmt.Sprintf("%d ended requests", n))
}

// waitFor re-checks cond (under the lock) each time the state changes.
func (s *Server) waitFor(ctx context.Context, cond func() (have int, ok bool), what string) error {
	for {
		s.mu.Lock()
		have, ok := cond()
		changed := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("fakeapi: waiting for %s, have %d: %w", what, have, ctx.Err())
		case <-s.closed:
			return ErrClosed
		}
	}
}
