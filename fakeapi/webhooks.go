package fakeapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Webhook delivery headers, as the API names them (openemail-api.md §2.4).
const (
	HeaderWebhookSignature = "X-OpenEmail-Signature" // t=<unix seconds>,v1=<hex HMAC-SHA256>
	HeaderWebhookEvent     = "X-OpenEmail-Event"     // the event type
	HeaderWebhookDelivery  = "X-OpenEmail-Delivery"  // the delivery id, whd_…: the same on every copy and retry
)

// The event types the fake sends (a subset of the API's, §2.4).
const (
	EventDelivered       = "email.delivered"
	EventBounced         = "email.bounced"
	EventComplained      = "email.complained"
	EventDeliveryDelayed = "email.delivery_delayed"
)

// Webhook sending parameters.
const (
	// WebhookAttempts is how many times one copy of an event is POSTed
	// before the fake gives up on it: the first try and three retries, after
	// a non-2xx answer or a network error.
	WebhookAttempts = 4
	// WebhookBackoff is the wait before the first retry; it doubles after
	// each (50 ms, 100 ms, 200 ms).
	WebhookBackoff = 50 * time.Millisecond
	// WebhookTimeout bounds one POST.
	WebhookTimeout = 5 * time.Second
	// WebhookHoldMax is the longest webhook_out_of_order holds an event when
	// not enough later events come.
	WebhookHoldMax = 2 * time.Second
	// WebhookStaleBy is how far in the past webhook_stale puts the
	// signature's t: one second beyond the verifier's 300 s tolerance.
	WebhookStaleBy = 301 * time.Second
)

// WebhookAttempt is one POST of a webhook event to Config.WebhookURL, as
// Server.Webhooks and GET /_fake/webhooks list them. The secret is never
// recorded.
type WebhookAttempt struct {
	EventID    string    `json:"eventId"`
	DeliveryID string    `json:"deliveryId"`
	Type       string    `json:"type"`
	EmailID    string    `json:"emailId"`
	Copy       int       `json:"copy"`    // 1, or 2 for the second copy of webhook_duplicate
	Attempt    int       `json:"attempt"` // 1 for the first try of the copy, 2… for retries
	SentAt     time.Time `json:"sentAt"`  // on Config.Now
	Timestamp  int64     `json:"timestamp"`
	Status     int       `json:"status"`          // the receiver's answer; 0 after a network error
	Error      string    `json:"error,omitempty"` // the network error
	// Fault lists the event rules that fired for the event, comma-separated.
	Fault string `json:"fault,omitempty"`
}

// outEvent is one event waiting in, or taken from, the sender's queue.
type outEvent struct {
	id, deliveryID, typ, emailID string
	body                         []byte
	fired                        []string
	duplicate, badSignature      bool
	stale                        bool
	notBefore                    time.Time // wall clock: webhook_delay
	hold                         int       // later events still to go first: webhook_out_of_order
	holdUntil                    time.Time // wall clock: when the hold ends anyway
	gen                          int       // the reset generation it was queued in
}

// webhookBody is the event JSON. The contract names only the top-level id
// and type; createdAt and data are the fake's choice.
type webhookBody struct {
	ID        string      `json:"id"`
	Type      string      `json:"type"`
	CreatedAt string      `json:"createdAt"`
	Data      webhookData `json:"data"`
}

type webhookData struct {
	EmailID string   `json:"emailId"`
	To      []string `json:"to"`
}

// checkWebhook checks the webhook settings; its errors never include the
// secret.
func checkWebhook(rawURL, secret string) error {
	if rawURL == "" {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook URL %q: want an absolute http or https URL", rawURL)
	}
	if strings.TrimSpace(secret) == "" {
		return errors.New("a webhook URL needs a webhook secret: the API signs every event and verifiers refuse a blank secret")
	}
	return nil
}

// Check reports what New would panic on: an invalid fault rule, rate limit
// or webhook setting.
func (c Config) Check() error {
	if _, err := checkFaults(c.Faults); err != nil {
		return err
	}
	if err := checkRate(c.Rate); err != nil {
		return err
	}
	return checkWebhook(c.WebhookURL, c.WebhookSecret)
}

// queueEventsLocked queues the webhook events of a message just delivered:
// email.delivered, or what an event-type rule makes of it. Broadcasts make
// none (the fake does not know their recipients).
func (s *Server) queueEventsLocked(m *message, now time.Time) {
	if s.cfg.WebhookURL == "" || m.isBroadcast() {
		return
	}
	rules := s.rulesWithLocked(m.eventFaults)
	types := []string{EventDelivered}
	var typeRule string
	for _, r := range rules {
		if !r.Kind.eventType() || !r.matchesEmail(m) || !s.spendForLocked(m.apiKey, m.idemKey, r) {
			continue
		}
		typeRule = r.String()
		switch r.Kind {
		case FaultBounce:
			types = []string{EventBounced}
		case FaultComplain:
			types = []string{EventComplained}
		case FaultDelayThenBounce:
			types = []string{EventDeliveryDelayed, EventBounced}
		}
		break
	}
	wall := time.Now()
	for _, typ := range types {
		ev := &outEvent{
			id:         newID("evt_"),
			deliveryID: newID("whd_"),
			typ:        typ,
			emailID:    m.id,
			gen:        s.webhookGen,
		}
		if typeRule != "" {
			ev.fired = append(ev.fired, typeRule)
		}
		for _, r := range rules {
			if r.Kind.phase() != phaseEvent || r.Kind.eventType() || !r.matchesEmail(m) ||
				!s.spendForLocked(m.apiKey, m.idemKey, r) {
				continue
			}
			ev.fired = append(ev.fired, r.String())
			switch r.Kind {
			case FaultWebhookDuplicate:
				ev.duplicate = true
			case FaultWebhookBadSignature:
				ev.badSignature = true
			case FaultWebhookStale:
				ev.stale = true
			case FaultWebhookDelay:
				ev.notBefore = wall.Add(r.Delay)
			case FaultWebhookOutOfOrder:
				ev.hold = max(ev.hold, r.Hold)
			}
		}
		if ev.hold > 0 {
			ev.holdUntil = later(wall, ev.notBefore).Add(WebhookHoldMax)
		}
		ev.body, _ = json.Marshal(webhookBody{
			ID:        ev.id,
			Type:      typ,
			CreatedAt: now.UTC().Format(timeFormat),
			Data:      webhookData{EmailID: m.id, To: nonNil(slices.Clone(m.spec.to))},
		})
		s.events = append(s.events, ev)
	}
	select {
	case s.webhookWake <- struct{}{}:
	default:
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// matchesEmail reports whether an event rule takes a delivered email: to=
// against its own recipients, key= against its Idempotency-Key.
func (f Fault) matchesEmail(m *message) bool {
	if f.Key != "" && !strings.Contains(m.idemKey, f.Key) {
		return false
	}
	_, ok := f.rejectedField(m.spec)
	return ok
}

// startWebhooks starts the sender when a webhook URL is configured.
func (s *Server) startWebhooks() {
	if s.cfg.WebhookURL == "" {
		return
	}
	s.webhookWake = make(chan struct{}, 1)
	s.webhookStopped = make(chan struct{})
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	client := &http.Client{
		Transport: transport,
		Timeout:   WebhookTimeout,
		// A redirect is an answer like any other non-2xx: retried, not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.closed
		cancel()
	}()
	go func() {
		defer close(s.webhookStopped)
		defer transport.CloseIdleConnections()
		s.runWebhooks(ctx, client)
	}()
}

// runWebhooks is the sender: it takes the first event of the queue that is
// ready and sends it, until the server closes.
func (s *Server) runWebhooks(ctx context.Context, client *http.Client) {
	for {
		ev, wake := s.nextEvent()
		if ev != nil {
			s.sendEvent(ctx, client, ev)
			continue
		}
		var timer <-chan time.Time
		var t *time.Timer
		if !wake.IsZero() {
			t = time.NewTimer(time.Until(wake))
			timer = t.C
		}
		select {
		case <-s.webhookWake:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// nextEvent takes the first ready event off the queue, or says when the
// earliest held one may become ready (zero: wait for a new event).
func (s *Server) nextEvent() (*outEvent, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var wake time.Time
	soonest := func(t time.Time) {
		if t.After(now) && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for i, ev := range s.events {
		delayed := ev.notBefore.After(now)
		held := ev.hold > 0 && ev.holdUntil.After(now)
		if !delayed && !held {
			s.events = slices.Delete(s.events, i, i+1)
			return ev, time.Time{}
		}
		soonest(ev.notBefore)
		if held {
			soonest(ev.holdUntil)
		}
	}
	return nil, wake
}

// sendEvent POSTs an event (twice for webhook_duplicate), retrying each copy
// on a non-2xx answer or a network error, then counts it as sent.
func (s *Server) sendEvent(ctx context.Context, client *http.Client, ev *outEvent) {
	copies := 1
	if ev.duplicate {
		copies = 2
	}
	for copyN := 1; copyN <= copies; copyN++ {
		backoff := WebhookBackoff
		for attempt := 1; attempt <= WebhookAttempts; attempt++ {
			if attempt > 1 {
				if !s.pause(ctx, backoff) {
					return
				}
				backoff *= 2
			}
			rec := s.postEvent(ctx, client, ev, copyN, attempt)
			if ctx.Err() != nil {
				return
			}
			if rec.Status >= 200 && rec.Status < 300 {
				break
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.gen != s.webhookGen {
		return
	}
	s.webhooksSent++
	for _, other := range s.events {
		if other.hold > 0 {
			other.hold--
		}
	}
	s.notifyLocked()
}

// postEvent makes one attempt and records it.
func (s *Server) postEvent(ctx context.Context, client *http.Client, ev *outEvent, copyN, attempt int) WebhookAttempt {
	now := s.now()
	ts := now.Unix()
	if ev.stale {
		ts -= int64(WebhookStaleBy / time.Second)
	}
	secret := s.cfg.WebhookSecret
	if ev.badSignature {
		secret = "wrong-" + secret
	}
	rec := WebhookAttempt{
		EventID:    ev.id,
		DeliveryID: ev.deliveryID,
		Type:       ev.typ,
		EmailID:    ev.emailID,
		Copy:       copyN,
		Attempt:    attempt,
		SentAt:     now,
		Timestamp:  ts,
		Fault:      strings.Join(ev.fired, ","),
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(ev.body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "openemail-fake")
		req.Header.Set(HeaderWebhookSignature, SignWebhook(secret, ts, ev.body))
		req.Header.Set(HeaderWebhookEvent, ev.typ)
		req.Header.Set(HeaderWebhookDelivery, ev.deliveryID)
		var resp *http.Response
		if resp, err = client.Do(req); err == nil {
			rec.Status = resp.StatusCode
			resp.Body.Close()
		}
	}
	if err != nil {
		rec.Error = err.Error()
	}
	s.logger.Info("webhook", "event", ev.id, "type", ev.typ, "delivery", ev.deliveryID, "email", ev.emailID,
		"copy", copyN, "attempt", attempt, "status", rec.Status, "error", rec.Error, "fault", rec.Fault)
	s.mu.Lock()
	if ev.gen == s.webhookGen {
		s.webhooks = append(s.webhooks, rec)
		s.notifyLocked()
	}
	s.mu.Unlock()
	return rec
}

// SignWebhook renders the X-OpenEmail-Signature value for body sent at t:
// "t=<t>,v1=<lowercase hex HMAC-SHA256(secret, "<t>.<body>")>", the secret
// used as raw bytes (openemail-api.md §2.4, §7 item 10).
func SignWebhook(secret string, t int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	ts := strconv.FormatInt(t, 10)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Webhooks returns every webhook attempt, in the order made.
func (s *Server) Webhooks() []WebhookAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.webhooks)
}

// WebhooksSent counts the events the sender is done with: POSTed until the
// receiver answered 2xx or every attempt failed, both copies of a duplicate.
func (s *Server) WebhooksSent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhooksSent
}

// WaitWebhooks blocks until the sender is done with at least n events (see
// WebhooksSent), ctx ends, or the server closes.
func (s *Server) WaitWebhooks(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() (int, bool) {
		s.promoteDueLocked(s.now())
		return s.webhooksSent, s.webhooksSent >= n
	}, fmt.Sprintf("%d webhook events sent", n))
}
