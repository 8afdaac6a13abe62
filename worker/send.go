package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/outbox"
)

// errUnsendable marks a stored payload that cannot become a request; no
// attempt can fix it.
var errUnsendable = errors.New("payload cannot be sent")

type sendResult struct {
	messageID string
	replayed  bool
	// rate is what the answer's rate-limit headers said (nil: none), for
	// the fleet's budget.
	rate *client.RateInfo
}

// send makes the intent's API call with its stored key. The stored payload
// is already the call's JSON body, so it goes out as it is; the client
// applies only the contract's wire rules to it (recipients as arrays,
// scheduledAt in UTC), the same way on every attempt.
func (w *sendWorker) send(ctx context.Context, rec *outbox.Record) (res sendResult, err error) {
	var info client.RateInfo
	defer func() {
		if err == nil && info.Fields != "" {
			res.rate = &info
		}
	}()
	key, rate := client.WithIdempotencyKey(rec.Key), client.WithRateInfo(&info)
	switch rec.Kind {
	case outbox.KindEmail:
		var e *client.Email
		if e, err = w.client.Emails.SendJSON(ctx, rec.Payload, key, rate); err == nil {
			res = sendResult{messageID: e.ID, replayed: e.Replayed}
		}
	case outbox.KindBatch:
		var b *client.BatchResult
		if b, err = w.client.Emails.SendBatchJSON(ctx, rec.Payload, key, rate); err == nil {
			ids := make([]string, len(b.Data))
			for i, e := range b.Data {
				ids[i] = e.ID
			}
			res = sendResult{messageID: strings.Join(ids, ","), replayed: b.Replayed}
		}
	case outbox.KindTemplate:
		var e *client.Email
		if e, err = w.client.Templates.SendJSON(ctx, rec.TemplateID, rec.Payload, key, rate); err == nil {
			res = sendResult{messageID: e.ID, replayed: e.Replayed}
		}
	case outbox.KindBroadcast:
		var b *client.Broadcast
		if b, err = w.client.Broadcasts.SendJSON(ctx, rec.Payload, key, rate); err == nil {
			res = sendResult{messageID: b.ID, replayed: b.Replayed}
		}
	default:
		return sendResult{}, fmt.Errorf("%w: unknown kind %q", errUnsendable, rec.Kind)
	}
	if errors.Is(err, client.ErrInvalidRequest) {
		// Refused before sending (not a JSON object, a bad template id).
		err = fmt.Errorf("%w: %s payload: %w", errUnsendable, rec.Kind, err)
	}
	return res, err
}
