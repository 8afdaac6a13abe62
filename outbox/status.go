package outbox

import "github.com/sendonce/sendonce/internal/base/status"

// Transition is a move of an intent that a status hook is told of: into
// a final state of its send (sent, failed, suppressed, canceled), or into
// a delivery status the API's webhooks reported (delivered, bounced,
// complained).
type Transition = status.Transition

// The transitions a StatusHook is told of.
const (
	TransitionSent       = status.Sent
	TransitionFailed     = status.Failed
	TransitionSuppressed = status.Suppressed
	TransitionCanceled   = status.Canceled
	TransitionDelivered  = status.Delivered
	TransitionBounced    = status.Bounced
	TransitionComplained = status.Complained
)

// Status is one transition of one intent, as a StatusHook is told of it:
// the transition, the intent's key, kind (a Kind's value), run key ("":
// none), tenant ("": the default), tags (the email's, its metadata; nil
// when none) and the API's message id once it was sent.
type Status = status.Status

// StatusHook is called with the transaction that records transitions of
// intents, before it commits, with the transitions it records: the
// application's own writes in tx (set invoices.emailed_at, say) commit with
// them or not at all. An error rolls the recording back; it is then tried
// again as a recording that failed would be (a sent intent is sent again
// under its key, which the API replays, and recorded again; a webhook
// delivery is answered 500, and the API delivers it again). It is called
// once for each transition that commits, and never for one that does not:
// a replayed send of an intent already sent, a second record of one
// answer, a webhook event delivered again, record nothing and call
// nothing.
//
// It should be quick: it runs while the rows it is told of are locked.
// The statuses of one statement come in one call (a batch of answers), so
// that one statement of the hook's can serve them all.
type StatusHook = status.Hook
