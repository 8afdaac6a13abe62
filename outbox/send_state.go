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

// ClaimMany is Claim for many intents in one statement, for a worker
// claiming the intents of jobs that run at the same time. The result holds
// the intents it claimed; a key it does not hold was not sendable (or does
// not exist): ask Claim about it. Rows are locked in id order, so
// concurrent calls cannot deadlock.
func ClaimMany(ctx context.Context, db DB, keys []string) (map[string]*Record, error) {
	rows, err := db.Query(ctx, `WITH l AS (
			SELECT id FROM sendonce_outbox
			WHERE idempotency_key = ANY($1) AND state IN ('pending', 'sending')
			ORDER BY id FOR UPDATE),
		u AS (
			UPDATE sendonce_outbox o
			SET state = 'sending', attempts = o.attempts + 1,
				first_attempt_at = coalesce(o.first_attempt_at, now()), updated_at = now()
			FROM l WHERE o.id = l.id
			RETURNING o.*)
		SELECT `+columns+` FROM u`, keys)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	defer rows.Close()
	out := make(map[string]*Record, len(keys))
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		out[rec.Key] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	return out, nil
}

// Sent is one API answer for MarkSentMany.
type Sent struct {
	Key       string
	MessageID string
	Replayed  bool
}

// MarkSentMany is MarkSent for many intents in one statement, locking rows
// in id order.
func MarkSentMany(ctx context.Context, db DB, sent []Sent) error {
	keys := make([]string, len(sent))
	ids := make([]string, len(sent))
	replayed := make([]bool, len(sent))
	for i, s := range sent {
		keys[i], ids[i], replayed[i] = s.Key, s.MessageID, s.Replayed
	}
	_, err := db.Exec(ctx, `UPDATE sendonce_outbox o
		SET state = 'sent', message_id = m.message_id, replayed = m.replayed, last_error = NULL,
			sent_at = now(), updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::bool[]) AS m(key, message_id, replayed),
			(SELECT id FROM sendonce_outbox WHERE idempotency_key = ANY($1) AND state IN ('pending', 'sending')
			 ORDER BY id FOR UPDATE) AS l
		WHERE o.id = l.id AND o.idempotency_key = m.key`, keys, ids, replayed)
	if err != nil {
		return fmt.Errorf("outbox: mark sent: %w", err)
	}
	return nil
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
