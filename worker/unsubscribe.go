package worker

import (
	"context"
	"fmt"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/base/unsub"
)

// reasonNoUnsubscribe parks an intent with a topic on a worker without
// SendConfig.Unsubscribe: bulk mail without one-click unsubscribe is what
// the mailbox providers refuse, and sending it so cannot be taken back.
const reasonNoUnsubscribe = "not sent: the intent has topic %q, and this worker has no unsubscribe settings " +
	"(SendConfig.Unsubscribe; sendonce work --unsubscribe-url and SENDONCE_UNSUBSCRIBE_SECRET) to give it " +
	"List-Unsubscribe headers; retry it once a worker has them"

// listUnsubscribe gives an intent with a topic its List-Unsubscribe
// headers. The first attempt's headers are frozen on the row
// (list_unsubscribe) before the API sees the key, and every attempt sends
// the frozen ones, so a replay sends the same bytes even after the secret
// or the URL changed. A worker without unsubscribe settings parks the
// intent as failed (no API call) rather than send it without them.
func (a *attempt) listUnsubscribe(ctx context.Context) (parked bool, err error) {
	rec := a.rec
	if rec.Topic == "" {
		return false, nil
	}
	frozen := rec.ListUnsubscribe
	if frozen == nil {
		if a.w.signer == nil {
			return true, a.park(ctx, ResultFailed, false, fmt.Sprintf(reasonNoUnsubscribe, rec.Topic))
		}
		h, err := a.w.signer.Freeze(string(rec.Kind), rec.Payload, rec.Topic, rec.SuppressedRecipients)
		if err != nil {
			return true, a.park(ctx, ResultFailed, false, fmt.Sprintf("%v: cannot add the unsubscribe headers", err))
		}
		// The first writer wins: a claim that overlapped this one (a
		// crash's rescue) sends what was frozen first.
		if frozen, err = store.WorkerFreezeListUnsubscribe(ctx, a.w.pool, rec.ID, string(h)); err != nil {
			return false, fmt.Errorf("worker: freeze the unsubscribe headers of %q: %w", rec.Key, err)
		}
	}
	body, err := unsub.Attach(string(rec.Kind), rec.Payload, frozen)
	if err != nil {
		return true, a.park(ctx, ResultFailed, false, fmt.Sprintf("%v: cannot add the unsubscribe headers", err))
	}
	with := *rec
	with.Payload, with.ListUnsubscribe = body, frozen
	a.rec = &with
	return false, nil
}
