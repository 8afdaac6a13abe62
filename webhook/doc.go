// Package webhook receives the OpenEmail API's signed delivery webhooks and
// records them in the outbox's database.
//
// A Handler verifies each delivery's X-OpenEmail-Signature (see Verify),
// stores the event in sendonce_event once per delivery id, and gives the
// intent whose message it is about a delivery status (outbox.Record's
// DeliveryStatus): delivered, delivery_delayed, bounced, complained, failed
// or suppressed, by the precedence documented on outbox.DeliveryStatus. It
// answers 2xx only after the event is committed, so the API sends again
// whatever was not stored.
//
// An event about a message whose send is not recorded yet (it can arrive
// before the worker records the API's answer) is stored unmatched and
// applied by MatchPending, which the workers' sweeper runs every second,
// once the intent has that message id. Every change
// of an intent's delivery status is announced with
// pg_notify('sendonce_delivery', '{"key": "<idempotency key>", "status":
// "<status>"}') at commit: an application can LISTEN sendonce_delivery to
// react (see the example).
//
// Events also keep the suppression list (sendonce_suppression) in step:
// email.bounced (unless the event calls the bounce soft or transient) and
// email.complained put the addresses they are about on it, as do the API's
// own email.suppressed and suppression.added; suppression.removed takes
// them off. The addresses are the event's data.to (a string or an array),
// or else data.email, data.address or data.recipient; an email event
// without any names the recipients of the intent it matched. Each event is
// applied once. A worker parks an intent whose recipients are all
// suppressed before any API call (see package worker).
//
// The answers:
//
//	200  stored (or stored before: a delivery sent again is stored once)
//	405  not a POST
//	413  a body over 1 MiB
//	401  the signature header missing or malformed, its timestamp more
//	     than 5 minutes away from now (either way), or no signature that
//	     matches any secret
//	400  a signed body that is not a JSON object with a string "type" and
//	     "id" (at most 255 characters each, as the delivery id header)
//	500  the database failed; nothing was stored, and the API will retry
//
// Nothing is stored for a refused delivery. The secrets and the signature
// are never logged or echoed.
package webhook
