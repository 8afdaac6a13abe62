package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/internal/base/store"
)

// Cancel cancels an intent that nothing of can have reached the API: it is
// pending, in no batch, and either no attempt has been made or none of its
// attempts may have been delivered (it is not uncertain: each attempt
// failed before any byte of the request left, a refused connection or a
// DNS failure, or was answered with a 429). An intent retrying after an
// attempt whose outcome is unknown (a timeout, a 5xx, a lost answer), or
// retried with force after one (the force clears uncertain), is refused: canceling it would not unsend what the API may hold. The drain
// claims only pending intents; the River job of an intent from a release
// before the drain is cancelled in the same transaction. Any other intent
// returns a *StateError and is left as it was.
func (o *Outbox) Cancel(ctx context.Context, key string) (*Record, error) {
	var rec *Record
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		rec, err = recordOf(store.CancelIntent(ctx, tx, key))
		if errors.Is(err, pgx.ErrNoRows) {
			cur, gerr := get(ctx, tx, key)
			if gerr != nil {
				return gerr
			}
			return &StateError{Key: key, Op: "cancel", State: cur.State, Reason: cur.CancelRefusal()}
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

// Cancelable reports whether Cancel would cancel the intent as read (see
// CancelRefusal).
func (r *Record) Cancelable() bool { return r.CancelRefusal() == "" }

// CancelRefusal is why Cancel would refuse the intent as read, "" when it
// would cancel it: it is pending, in no batch, and no attempt of it may have
// reached the API (none was made; or it is not uncertain, and no forced
// retry set an uncertain attempt aside).
func (r *Record) CancelRefusal() string {
	switch {
	case r.State == StatePending && r.BatchKey != "":
		return fmt.Sprintf("it is frozen into batch %s with other intents, and a frozen batch's request never changes", r.BatchKey)
	case r.State == StatePending && r.Attempts > 0 && r.ForcedRetryAt != nil:
		return fmt.Sprintf("%d send attempt(s) already made, and one before its forced retry at %s may have reached the API",
			r.Attempts, r.ForcedRetryAt.UTC().Format(time.RFC3339))
	case r.State == StatePending && r.Attempts > 0 && r.Uncertain:
		return fmt.Sprintf("%d send attempt(s) already made, and one may have reached the API (it is uncertain: a timeout, "+
			"a 5xx or a lost answer); it is retried under its key, which the API replays if it took it", r.Attempts)
	case r.State == StatePending:
		return ""
	case r.State == StateSending:
		return "a worker is sending it now"
	case r.State == StateCanceled:
		return "it is already canceled"
	default:
		return "only a pending intent none of whose attempts may have reached the API can be canceled"
	}
}
