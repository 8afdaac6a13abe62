package worker

import (
	"context"
	"encoding/json"
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
}

// send makes the intent's API call with its stored key.
func (w *SendWorker) send(ctx context.Context, rec *outbox.Record) (sendResult, error) {
	key := client.WithIdempotencyKey(rec.Key)
	switch rec.Kind {
	case outbox.KindEmail:
		var p client.EmailParams
		if err := decode(rec, &p); err != nil {
			return sendResult{}, err
		}
		e, err := w.client.Emails.Send(ctx, &p, key)
		if err != nil {
			return sendResult{}, err
		}
		return sendResult{e.ID, e.Replayed}, nil
	case outbox.KindBatch:
		var p struct {
			Emails []*client.EmailParams `json:"emails"`
		}
		if err := decode(rec, &p); err != nil {
			return sendResult{}, err
		}
		b, err := w.client.Emails.SendBatch(ctx, p.Emails, key)
		if err != nil {
			return sendResult{}, err
		}
		ids := make([]string, len(b.Data))
		for i, e := range b.Data {
			ids[i] = e.ID
		}
		return sendResult{strings.Join(ids, ","), b.Replayed}, nil
	case outbox.KindTemplate:
		var p client.TemplateSendParams
		if err := decode(rec, &p); err != nil {
			return sendResult{}, err
		}
		e, err := w.client.Templates.Send(ctx, rec.TemplateID, &p, key)
		if err != nil {
			return sendResult{}, err
		}
		return sendResult{e.ID, e.Replayed}, nil
	case outbox.KindBroadcast:
		var p client.BroadcastParams
		if err := decode(rec, &p); err != nil {
			return sendResult{}, err
		}
		b, err := w.client.Broadcasts.Send(ctx, &p, key)
		if err != nil {
			return sendResult{}, err
		}
		return sendResult{b.ID, b.Replayed}, nil
	}
	return sendResult{}, fmt.Errorf("%w: unknown kind %q", errUnsendable, rec.Kind)
}

func decode(rec *outbox.Record, v any) error {
	if err := json.Unmarshal(rec.Payload, v); err != nil {
		return fmt.Errorf("%w: %s payload: %v", errUnsendable, rec.Kind, err)
	}
	return nil
}
