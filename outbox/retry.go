package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/base/suppress"
)

// DefaultReplayWindow is how long after an intent's first attempt its key
// is trusted to be remembered by the API: an hour short of the 24 h the
// email APIs we know keep idempotency keys.
const DefaultReplayWindow = 23 * time.Hour

// MaxReplayWindow is the longest replay window accepted: the API's own 24 h.
const MaxReplayWindow = 24 * time.Hour

// RetryOptions tune Retry. The zero value is the safe default.
type RetryOptions struct {
	// Force retries an intent even when a send now could be a second
	// delivery (see Retry). The row records when it was forced.
	Force bool
	// ReplayWindow is the window the workers use (default
	// DefaultReplayWindow).
	ReplayWindow time.Duration
}

// ErrMayDeliverTwice matches (errors.Is) the *StateError of a retry refused
// because it could deliver the intent a second time.
var ErrMayDeliverTwice = errors.New("outbox: a retry could deliver a second time")

// Retry puts a failed intent back to pending with the same key, for the
// workers' drains to claim (a member of a batch retried whole goes with its
// batch's new River job). The intent keeps its first attempt's time, so the replay
// window still runs from it, and gets a new budget of attempts and
// snoozes.
//
// An intent none of whose attempts may have reached the API (each was
// answered with an error, such as a 422 for a bad payload) is always
// retried: the API holds nothing under its key. An uncertain one (a network
// error, a 5xx or a crash left some attempt's outcome unknown) is retried
// while its replay window lasts, since the API replays what it delivered.
// After the window the API may have forgotten the key, and a send could
// deliver it a second time: Retry refuses with a *StateError matching
// ErrMayDeliverTwice unless opts.Force is set. A forced retry starts a new
// window and records the time on the row (ForcedRetryAt).
//
// An intent that went out in a coalesced batch is retried alone when no
// attempt of the batch may have reached the API for it (the API refused
// the batch, or this email in it). One whose batch failed with an unknown
// outcome is retried with its batch, whole, under the batch's key, with
// every member that failed with it, while the window lasts; after it, or
// when the batch was answered without a result for it, only with force,
// alone.
func (o *Outbox) Retry(ctx context.Context, key string, opts *RetryOptions) (*Record, error) {
	if opts == nil {
		opts = &RetryOptions{}
	}
	window := opts.ReplayWindow
	if window <= 0 {
		window = DefaultReplayWindow
	}
	var rec *Record
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		row, expired, err := store.LockIntentForRetry(ctx, tx, key, window.Seconds())
		cur, err := recordOf(row, err)
		if err != nil {
			return notFound(err, key)
		}
		if cur.State == StateSuppressed {
			rec, err = o.retrySuppressed(ctx, tx, cur)
			return err
		}
		if cur.State != StateFailed {
			return &StateError{Key: key, Op: "retry", State: cur.State, Reason: "only a failed or suppressed intent can be retried"}
		}
		if cur.BatchKey != "" && cur.Uncertain && !expired && !opts.Force {
			// The batch may have reached the API: only the same request
			// under the same key is safe, so the batch goes again whole.
			// With force the operator, having checked, sends it alone.
			rec, err = o.retryBatch(ctx, tx, cur)
			return err
		}
		if expired && !opts.Force {
			return &StateError{Key: key, Op: "retry", State: cur.State, err: ErrMayDeliverTwice, Reason: fmt.Sprintf(
				"an attempt may have reached the API, and the %s replay window from its first attempt (%s) has passed: "+
					"the API may no longer remember the key, so a retry could deliver it a second time; "+
					"check whether the recipient got it, then retry with force (sendonce retry --force) to send it anyway",
				window, cur.FirstAttemptAt.UTC().Format(time.RFC3339))}
		}
		// With force the operator takes the risk: a new window, as for a
		// new intent.
		rec, err = recordOf(store.RetryIntent(ctx, tx, cur.ID, opts.Force))
		if err != nil {
			return err
		}
		return wakeDrains(ctx, tx)
	})
	if err != nil {
		var se *StateError
		if errors.As(err, &se) || errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox: retry: %w", err)
	}
	return rec, nil
}

// retryBatch retries the failed batch that cur went out in, whole: the
// same body under the same key, with every member it failed. A batch that
// was answered (so cur's outcome is unknown for another reason) is not sent
// again: a send of cur alone could deliver it twice.
func (o *Outbox) retryBatch(ctx context.Context, tx pgx.Tx, cur *Record) (*Record, error) {
	state, queue, err := store.LockBatchForRetry(ctx, tx, cur.BatchKey)
	if err != nil {
		return nil, fmt.Errorf("read batch %s: %w", cur.BatchKey, err)
	}
	if state != "failed" {
		return nil, &StateError{Key: cur.Key, Op: "retry", State: cur.State, err: ErrMayDeliverTwice, Reason: fmt.Sprintf(
			"it went out in batch %s (now %s), whose answer did not tell this intent's outcome: a send alone could "+
				"deliver it a second time; check whether the recipient got it, then retry with force (sendonce retry --force)",
			cur.BatchKey, state)}
	}
	job, err := o.river.InsertTx(ctx, tx, sendjob.BatchArgs{Key: cur.BatchKey}, sendjob.InsertOpts(queue, time.Time{}, sendjob.PriorityUrgent))
	if err != nil {
		return nil, fmt.Errorf("insert river job: %w", err)
	}
	if err := store.RetryFailedBatch(ctx, tx, cur.BatchKey, job.Job.ID); err != nil {
		return nil, err
	}
	return get(ctx, tx, cur.Key)
}

// retrySuppressed puts a suppressed intent back on the drain.
// No attempt of it reached the API, so its next claim looks its recipients
// up on the list again; while every recipient is still on it, the retry is
// refused, since it would only be parked again.
func (o *Outbox) retrySuppressed(ctx context.Context, tx pgx.Tx, cur *Record) (*Record, error) {
	still, err := store.StillSuppressed(ctx, tx, cur.ID)
	if err != nil {
		return nil, fmt.Errorf("read suppressed recipients: %w", err)
	}
	if _, none, err := suppress.Strip(string(cur.Kind), cur.Payload, still); err == nil && none {
		return nil, &StateError{Key: cur.Key, Op: "retry", State: cur.State, Reason: fmt.Sprintf(
			"every recipient is still on the suppression list (%s): take them off first "+
				"(sendonce suppression remove), or the retry is parked again", strings.Join(still, ", "))}
	}
	rec, err := recordOf(store.RetrySuppressed(ctx, tx, cur.ID))
	if err != nil {
		return nil, err
	}
	return rec, wakeDrains(ctx, tx)
}

// wakeDrains tells the workers' drains, when tx commits, that an intent is
// due (the channel the producers notify, see insertSQL).
func wakeDrains(ctx context.Context, tx pgx.Tx) error {
	return store.WakeDrains(ctx, tx)
}
