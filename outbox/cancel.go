package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Cancel cancels an intent whose send has not started: it is pending and no
// attempt has been made, so nothing can have reached the API. The drain
// claims only pending intents; the River job of an intent from a release
// before the drain is cancelled in the same transaction. Any other intent
// returns a
// *StateError and is left as it was.
func (o *Outbox) Cancel(ctx context.Context, key string) (*Record, error) {
	var rec *Record
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		rec, err = scanRecord(tx.QueryRow(ctx, `UPDATE sendonce_outbox
			SET state = 'canceled', updated_at = now()
			WHERE idempotency_key = $1 AND state = 'pending' AND attempts = 0 AND batch_key IS NULL
			RETURNING `+columns, key))
		if errors.Is(err, pgx.ErrNoRows) {
			cur, gerr := get(ctx, tx, key)
			if gerr != nil {
				return gerr
			}
			return &StateError{Key: key, Op: "cancel", State: cur.State, Reason: cancelRefusal(cur)}
		}
		if err != nil {
			return err
		}
		if rec.JobID != nil {
			if _, err := o.river.JobCancelTx(ctx, tx, *rec.JobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("cancel river job %d: %w", *rec.JobID, err)
			}
		}
		return nil
	})
	if err != nil {
		var se *StateError
		if errors.As(err, &se) || errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox: cancel: %w", err)
	}
	return rec, nil
}

func cancelRefusal(r *Record) string {
	switch {
	case r.State == StatePending && r.BatchKey != "" && r.Attempts == 0:
		return fmt.Sprintf("it is frozen into batch %s with other intents, and a frozen batch's request never changes", r.BatchKey)
	case r.State == StatePending:
		return fmt.Sprintf("%d send attempt(s) already made; one may have reached the API", r.Attempts)
	case r.State == StateSending:
		return "a worker is sending it now"
	case r.State == StateCanceled:
		return "it is already canceled"
	default:
		return "only a pending intent whose send has not started can be canceled"
	}
}
