package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The functions in this file are the worker's side of an intent's
// lifecycle. Each is one statement, so each is atomic on its own.

// Claim marks an intent as being sent, counts the attempt and stamps the
// first attempt's time (the start of its replay window). An intent left in
// sending by a crashed worker is claimed again: that is how a crash turns
// into a replay. ok is false, with the record as it stands, when the intent
// is no longer sendable (sent, failed or canceled).
func Claim(ctx context.Context, db DB, key string) (rec *Record, ok bool, err error) {
	rec, err = scanRecord(db.QueryRow(ctx, `UPDATE sendonce_outbox
		SET state = 'sending', attempts = attempts + 1,
			first_attempt_at = coalesce(first_attempt_at, now()), updated_at = now()
		WHERE idempotency_key = $1 AND state IN ('pending', 'sending')
		RETURNING `+columns, key))
	if errors.Is(err, pgx.ErrNoRows) {
		rec, err = Get(ctx, db, key)
		if err != nil {
			return nil, false, err
		}
		return rec, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("outbox: claim %q: %w", key, err)
	}
	return rec, true, nil
}

// MarkSent records the API's answer: the message id and whether the API
// replayed an earlier delivery.
func MarkSent(ctx context.Context, db DB, key, messageID string, replayed bool) error {
	return update(ctx, db, key, "mark sent", `UPDATE sendonce_outbox
		SET state = 'sent', message_id = $2, replayed = $3, last_error = NULL, sent_at = now(), updated_at = now()
		WHERE idempotency_key = $1 AND state IN ('pending', 'sending')`, messageID, replayed)
}

// MarkFailed parks an intent as failed with the reason.
func MarkFailed(ctx context.Context, db DB, key, reason string) error {
	return update(ctx, db, key, "mark failed", `UPDATE sendonce_outbox
		SET state = 'failed', last_error = $2, updated_at = now()
		WHERE idempotency_key = $1 AND state IN ('pending', 'sending')`, reason)
}

// MarkPending puts an intent back to pending after an attempt that will be
// tried again, with what went wrong.
func MarkPending(ctx context.Context, db DB, key, lastError string) error {
	return update(ctx, db, key, "mark pending", `UPDATE sendonce_outbox
		SET state = 'pending', last_error = $2, updated_at = now()
		WHERE idempotency_key = $1 AND state IN ('pending', 'sending')`, lastError)
}

func update(ctx context.Context, db DB, key, op, sql string, args ...any) error {
	if _, err := db.Exec(ctx, sql, append([]any{key}, args...)...); err != nil {
		return fmt.Errorf("outbox: %s %q: %w", op, key, err)
	}
	return nil
}
