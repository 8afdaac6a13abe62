// Package webhook receives the OpenEmail API's signed delivery webhooks and
// records them in the outbox's database.
//
// A Handler verifies each delivery's X-OpenEmail-Signature (see Verify),
// stores the event in sendonce_event once per event id (the signed body's
// "id": the X-OpenEmail-Delivery header is not signed, so a captured event
// posted again under another header, or none, is the event already stored
// and is applied no second time; the header is kept with the event for the
// log), and gives the intent whose message it is about a delivery status
// (outbox.Record's DeliveryStatus): delivered, delivery_delayed, bounced,
// complained, failed or suppressed, by the precedence documented on
// outbox.DeliveryStatus. A batch intent has a message per email, and the
// events of each are its own: its status is the highest-ranked of theirs.
// It answers 2xx only after the event is committed, so the API sends again
// whatever was not stored.
//
// An event about a message whose send is not recorded yet (it can arrive
// before the worker records the API's answer) is stored unmatched and
// applied by the workers' sweeper (every second) once the intent has that
// message id. Every change
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
// applied once, and in the order of the events' own time (createdAt, or the
// time received without one), not of their arrival: an event changes an
// address only if it is later than the last change applied to it (kept
// also for a removal, in sendonce_suppression_change), and at the same
// instant an addition wins over a removal. A change by hand
// (outbox.Outbox.Suppress, Unsuppress) is made now, always applies, and
// counts as later than every change before it. A worker parks an intent
// whose recipients are all suppressed before any API call (see package
// worker).
//
// The answers:
//
//	200  stored (or stored before: an event sent again is stored once)
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
