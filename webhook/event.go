package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// maxIDLen bounds the ids stored from a delivery (the event's id and type,
// and the delivery id header).
const maxIDLen = 255

// event is what is stored of a delivery besides its raw body.
type event struct {
	// DeliveryID is the delivery header, or the event's id without one. It
	// is not signed: it is kept for the log and the API's delivery log,
	// and never used as a key (ID is).
	DeliveryID string
	ID         string // the signed event id: the stored event's key
	Type       string
	EmailID    *string    // nil when the event names no message
	OccurredAt *time.Time // nil when the event has no readable createdAt
}

// errBody is a body that is not an event.
var errBody = errors.New("webhook: bad event")

// parseEvent reads an event from a verified body. deliveryID is the
// delivery header, or empty.
func parseEvent(body []byte, deliveryID string) (*event, error) {
	var top map[string]json.RawMessage
	if t := strings.TrimLeft(string(body), " \t\r\n"); !strings.HasPrefix(t, "{") {
		return nil, fmt.Errorf("%w: the body is not a JSON object", errBody)
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("%w: the body is not a JSON object: %v", errBody, err)
	}
	ev := &event{}
	var ok bool
	if ev.Type, ok = stringField(top, "type"); !ok || ev.Type == "" || len(ev.Type) > maxIDLen {
		return nil, fmt.Errorf("%w: want a \"type\" string of 1 to %d bytes", errBody, maxIDLen)
	}
	if ev.ID, ok = stringField(top, "id"); !ok || ev.ID == "" || len(ev.ID) > maxIDLen {
		return nil, fmt.Errorf("%w: want an \"id\" string of 1 to %d bytes", errBody, maxIDLen)
	}
	ev.DeliveryID = strings.TrimSpace(deliveryID)
	if len(ev.DeliveryID) > maxIDLen {
		return nil, fmt.Errorf("%w: the %s header is over %d bytes", errBody, DeliveryHeader, maxIDLen)
	}
	if ev.DeliveryID == "" {
		ev.DeliveryID = ev.ID
	}
	var data map[string]json.RawMessage
	if raw, ok := top["data"]; ok && json.Unmarshal(raw, &data) == nil {
		for _, name := range []string{"emailId", "email_id", "id"} {
			if s, ok := stringField(data, name); ok && s != "" && len(s) <= maxIDLen {
				ev.EmailID = &s
				break
			}
		}
	}
	for _, name := range []string{"createdAt", "created_at"} {
		if s, ok := stringField(top, name); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				ev.OccurredAt = &t
				break
			}
		}
	}
	return ev, nil
}

// stringField returns m[name] when it is a JSON string.
func stringField(m map[string]json.RawMessage, name string) (string, bool) {
	raw, ok := m[name]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
