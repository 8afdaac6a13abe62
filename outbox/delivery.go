package outbox

import "slices"

// DeliveryStatus is what became of a sent intent's message after the API
// accepted it, as the API's signed delivery webhooks tell (see package
// webhook). An intent has none until an event about its message arrives.
type DeliveryStatus string

// The delivery statuses, from the webhook event types email.delivery_delayed,
// email.delivered, email.failed, email.bounced, email.suppressed and
// email.complained. Other event types are stored and change no status.
//
// An event's status replaces the intent's only if it ranks higher, or ranks
// the same and the event is later: delivery_delayed < delivered <
// failed = bounced = suppressed < complained. So a bounce is never undone
// by a late delivered or delivery_delayed, a complaint wins over
// everything, and events arriving in any order give the same status.
//
// A batch intent (KindBatch) sends one message per email, and the events
// of every one of them are its own: its status is the worst of its
// messages' by that same rule, the highest-ranked status any of them has
// (the latest event among equals). So it is bounced if one of its emails
// bounced, and delivered once one was delivered and none did worse: not a
// promise that every email was delivered (sendonce_event has each one's
// events).
const (
	DeliveryDelayed    DeliveryStatus = "delivery_delayed" // the receiving server deferred it; still trying
	DeliveryDelivered  DeliveryStatus = "delivered"        // the receiving server accepted it
	DeliveryFailed     DeliveryStatus = "failed"           // the API could not send it
	DeliveryBounced    DeliveryStatus = "bounced"          // the receiving server refused it
	DeliverySuppressed DeliveryStatus = "suppressed"       // not sent: the recipient is on a suppression list
	DeliveryComplained DeliveryStatus = "complained"       // the recipient marked it as spam
)

// DeliveryStatuses lists every delivery status in order of precedence.
var DeliveryStatuses = []DeliveryStatus{DeliveryDelayed, DeliveryDelivered, DeliveryFailed,
	DeliveryBounced, DeliverySuppressed, DeliveryComplained}

// Valid reports whether s is a known delivery status.
func (s DeliveryStatus) Valid() bool {
	return slices.Contains(DeliveryStatuses, s)
}
