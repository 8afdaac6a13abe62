package store

import (
	"context"
)

// The statements of an operator's Cancel and Retry of an intent (package
// outbox's cancel.go and retry.go), and the notification that wakes the
// workers' drains.

// outboxCancelSQL cancels the intent with key $1 when nothing of it can
// have reached the API: pending, in no batch, and either never attempted
// or none of its attempts uncertain (nor forced past one).
const outboxCancelSQL = `UPDATE sendonce_outbox
			SET state = 'canceled', updated_at = now()
			WHERE idempotency_key = $1 AND state = 'pending' AND batch_key IS NULL
				AND (attempts = 0 OR (NOT uncertain AND forced_retry_at IS NULL))
			RETURNING ` + IntentColumns

// CancelIntent cancels the intent with key key if nothing of it can have
// reached the API (outboxCancelSQL), and returns it as canceled (a whole
// row). Its error is pgx.ErrNoRows when it was not canceled (no such key,
// or another state), the database's otherwise, unwrapped.
func CancelIntent(ctx context.Context, db DB, key string) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, outboxCancelSQL, key))
}

// outboxLockForRetrySQL locks the intent with key $1 and tells whether an
// attempt may have reached the API and the replay window ($2 seconds)
// from its first attempt has passed.
const outboxLockForRetrySQL = `SELECT ` + IntentColumns + `,
				uncertain AND first_attempt_at + $2::float8 * interval '1 second' <= now()
			FROM sendonce_outbox WHERE idempotency_key = $1 FOR UPDATE`

// LockIntentForRetry locks the intent with key key (FOR UPDATE) and reads
// it (a whole row), with expired: whether it is uncertain and its replay
// window of window seconds from its first attempt has passed. Its error is
// pgx.ErrNoRows when there is no such key, unwrapped.
func LockIntentForRetry(ctx context.Context, db DB, key string, window float64) (in *Intent, expired bool, _ error) {
	in, err := ScanIntent(db.QueryRow(ctx, outboxLockForRetrySQL, key, window), &expired)
	return in, expired, err
}

// outboxBackToDrain is the SET list that puts a settled intent back on the
// drain: pending, with no River job (the workers' drains claim it; it is
// due at once, or at its send_at), and the tries, snoozes and 429s of a
// new intent, so the retry has all its attempts.
const outboxBackToDrain = `state = 'pending', job_id = NULL, next_attempt_at = NULL, tries = 0, rate_limited = 0, snoozes = 0`

// outboxForceRetrySQL retries the failed intent with id $1 with force: the
// operator takes the risk, so it gets a new replay window, as a new intent.
const outboxForceRetrySQL = `UPDATE sendonce_outbox
				SET ` + outboxBackToDrain + `, first_attempt_at = NULL, uncertain = false, batch_key = NULL,
					api_key_fingerprint = NULL, forced_retry_at = now(),
					last_error = 'retried with force by an operator after: ' || coalesce(last_error, ''), updated_at = now()
				WHERE id = $1 RETURNING ` + IntentColumns

// outboxRetrySQL retries the failed intent with id $1.
const outboxRetrySQL = `UPDATE sendonce_outbox
				SET ` + outboxBackToDrain + `, batch_key = NULL,
					last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = now()
				WHERE id = $1 RETURNING ` + IntentColumns

// RetryIntent puts the failed intent with id id back on the drain
// (outboxRetrySQL), or with force (outboxForceRetrySQL: a new replay
// window, forced_retry_at set), and returns it (a whole row). The error is
// the database's, unwrapped.
func RetryIntent(ctx context.Context, db DB, id int64, force bool) (*Intent, error) {
	if force {
		return ScanIntent(db.QueryRow(ctx, outboxForceRetrySQL, id))
	}
	return ScanIntent(db.QueryRow(ctx, outboxRetrySQL, id))
}

// outboxLockBatchSQL locks the batch with key $1.
const outboxLockBatchSQL = `SELECT state, queue FROM sendonce_batch WHERE idempotency_key = $1 FOR UPDATE`

// LockBatchForRetry locks the batch with key key (FOR UPDATE) and returns its
// state and queue. The error is the database's, unwrapped.
func LockBatchForRetry(ctx context.Context, db DB, key string) (state, queue string, _ error) {
	err := db.QueryRow(ctx, outboxLockBatchSQL, key).Scan(&state, &queue)
	return state, queue, err
}

// outboxRetryBatchSQL puts the failed batch with key $1 back to pending
// under River job $2, with every member that failed with it.
const outboxRetryBatchSQL = `WITH b AS (
			UPDATE sendonce_batch SET state = 'pending', job_id = $2,
				last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = now()
			WHERE idempotency_key = $1 RETURNING member_keys)
		UPDATE sendonce_outbox o SET state = 'pending', job_id = $2, snoozes = 0,
			last_error = 'retried with its batch by an operator after: ' || coalesce(o.last_error, ''), updated_at = now()
		FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = $1 AND o.state = 'failed'`

// RetryFailedBatch puts the failed batch with key key back to pending, with its
// new River job jobID, and every member of it that failed with it
// (outboxRetryBatchSQL). The error is the database's, unwrapped.
func RetryFailedBatch(ctx context.Context, db DB, key string, jobID int64) error {
	_, err := db.Exec(ctx, outboxRetryBatchSQL, key, jobID)
	return err
}

// outboxStillSuppressedSQL looks the recipients of intent $1 up on the
// suppression list (and its topic's unsubscribes) again.
const outboxStillSuppressedSQL = `SELECT sendonce_suppressed(kind, payload, topic) FROM sendonce_outbox WHERE id = $1`

// StillSuppressed returns the recipients of intent id that are on the
// suppression list now (or unsubscribed from its topic). The error is the
// database's, unwrapped.
func StillSuppressed(ctx context.Context, db DB, id int64) ([]string, error) {
	var still []string
	err := db.QueryRow(ctx, outboxStillSuppressedSQL, id).Scan(&still)
	return still, err
}

// outboxRetrySuppressedSQL puts the suppressed intent with id $1 back on
// the drain; its next claim looks its recipients up again.
const outboxRetrySuppressedSQL = `UPDATE sendonce_outbox
		SET ` + outboxBackToDrain + `, suppressed_recipients = NULL,
			last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = now()
		WHERE id = $1 RETURNING ` + IntentColumns

// RetrySuppressed puts the suppressed intent with id id back on the drain
// (outboxRetrySuppressedSQL) and returns it (a whole row). The error is the
// database's, unwrapped.
func RetrySuppressed(ctx context.Context, db DB, id int64) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, outboxRetrySuppressedSQL, id))
}

// outboxWakeSQL notifies the workers' drains (outboxNotifySQL).
const outboxWakeSQL = `SELECT ` + outboxNotifySQL

// WakeDrains tells the workers' drains, when db's transaction commits,
// that an intent is due: the channel the producers notify (see
// outboxNotifySQL). The error is the database's, unwrapped.
func WakeDrains(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, outboxWakeSQL)
	return err
}
