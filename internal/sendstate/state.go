// Package sendstate is the worker's side of an intent's lifecycle: claiming
// an intent for an attempt, recording the attempt's outcome, and giving a new
// River job to intents left without a working one. Producers and operators
// use package outbox; this is machinery behind package worker.
//
// Each function that moves one intent is one statement, so each is atomic
// on its own.
//
// An intent's row names the one River job that may send it (job_id). A job
// that is not that job (a job revived after Retry or after the reconciler
// gave the intent a new one) claims nothing and records nothing but a
// success, so two jobs never run one intent's send at once by design.
package sendstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/outbox"
)

// DB is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimColumns is what a claim returns of an intent: what a send needs.
const claimColumns = `id, idempotency_key, kind, payload, coalesce(template_id, ''), state, attempts,
	uncertain, snoozes, coalesce(api_key_fingerprint, ''), job_id, first_attempt_at`

func scanClaimed(row pgx.Row, extra ...any) (*outbox.Record, error) {
	r := &outbox.Record{}
	dest := []any{&r.ID, &r.Key, &r.Kind, &r.Payload, &r.TemplateID, &r.State, &r.Attempts,
		&r.Uncertain, &r.Snoozes, &r.APIKeyFingerprint, &r.JobID, &r.FirstAttemptAt}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	return r, nil
}

// ClaimRequest names an intent and the River job that wants to send it.
type ClaimRequest struct {
	Key   string
	JobID int64
}

// ClaimOptions are the claiming worker's identity and limits.
type ClaimOptions struct {
	// Owner is the claiming worker instance (its advisory lock id), or 0.
	Owner int32
	// KeyFingerprint identifies the API key the send will use.
	KeyFingerprint string
	// ReplayWindow is measured from the first attempt, on the database's
	// clock.
	ReplayWindow time.Duration
}

// Claimed is an intent claimed for one attempt: the fields a send needs.
type Claimed struct {
	Record *outbox.Record
	// WindowLeft is what remains of the replay window, measured by the
	// database's clock at the claim: zero or less when it has run out.
	WindowLeft time.Duration
}

// ClaimMany marks the intents of many jobs as being sent in one statement:
// one more attempt, the first attempt's time stamped (the start of its
// replay window), the owner and API key recorded. An intent left in sending
// by a crashed worker is claimed again, and marked uncertain: that is how a
// crash turns into a replay. The result holds the claims made, by job id; a
// job it does not hold may not send (its intent is settled, gone, or owned
// by another job): ask Peek about it. Rows are locked in id order, so
// concurrent calls cannot deadlock.
func ClaimMany(ctx context.Context, db DB, reqs []ClaimRequest, opts ClaimOptions) (map[int64]*Claimed, error) {
	keys := make([]string, len(reqs))
	jobIDs := make([]int64, len(reqs))
	for i, r := range reqs {
		keys[i], jobIDs[i] = r.Key, r.JobID
	}
	var owner *int32
	if opts.Owner != 0 {
		owner = &opts.Owner
	}
	// The rows are found by key (= ANY, which the unique index serves) and
	// their state is checked after the lock: a state predicate on the table
	// would let the planner scan the (state, created_at) index instead, and
	// after a quiet spell its statistics say there are no pending rows, so
	// that scan read every pending intent of a backlog on every claim (the
	// benchmark's drain after another scenario: ten times the database CPU).
	rows, err := db.Query(ctx, `WITH l AS (
			SELECT o.id, o.state AS old_state FROM sendonce_outbox o
			WHERE o.idempotency_key = ANY($1)
				AND (o.idempotency_key, o.job_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
			ORDER BY o.id FOR UPDATE OF o),
		u AS (
			UPDATE sendonce_outbox o
			SET state = 'sending', attempts = o.attempts + 1,
				uncertain = o.uncertain OR l.old_state = 'sending',
				first_attempt_at = coalesce(o.first_attempt_at, now()),
				claimed_by = $3,
				api_key_fingerprint = CASE
					WHEN $4 = '' THEN o.api_key_fingerprint
					WHEN o.uncertain OR l.old_state = 'sending' THEN coalesce(o.api_key_fingerprint, $4)
					ELSE $4 END,
				updated_at = now()
			FROM l WHERE o.id = l.id AND l.old_state IN ('pending', 'sending')
			RETURNING o.*)
		SELECT `+claimColumns+`, extract(epoch FROM first_attempt_at + $5::float8 * interval '1 second' - now())::float8 FROM u`,
		keys, jobIDs, owner, opts.KeyFingerprint, opts.ReplayWindow.Seconds())
	if err != nil {
		return nil, fmt.Errorf("sendstate: claim: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]*Claimed, len(reqs))
	for rows.Next() {
		var left float64
		rec, err := scanClaimed(rows, &left)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim: %w", err)
		}
		out[*rec.JobID] = &Claimed{Record: rec, WindowLeft: time.Duration(left * float64(time.Second))}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sendstate: claim: %w", err)
	}
	return out, nil
}

// Claim is ClaimMany for one job. ok is false when the job may not send;
// Peek says why.
func Claim(ctx context.Context, db DB, req ClaimRequest, opts ClaimOptions) (c *Claimed, ok bool, err error) {
	claimed, err := ClaimMany(ctx, db, []ClaimRequest{req}, opts)
	if err != nil {
		return nil, false, err
	}
	c, ok = claimed[req.JobID]
	return c, ok, nil
}

// Peeked is what Peek tells of an intent.
type Peeked struct {
	State outbox.State
	Kind  outbox.Kind
	JobID *int64
}

// Peek tells a job that could not claim its intent where the intent stands.
// It returns an error matching outbox.ErrNotFound when there is none. It
// is alike in shape to the outbox's Get on purpose: a skipped job reads
// three columns, not the whole intent.
func Peek(ctx context.Context, db DB, key string) (*Peeked, error) {
	p := &Peeked{}
	err := db.QueryRow(ctx, `SELECT state, kind, job_id FROM sendonce_outbox WHERE idempotency_key = $1`, key).Scan(&p.State, &p.Kind, &p.JobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", outbox.ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("sendstate: peek %q: %w", key, err)
	}
	return p, nil
}

// Sent is one API answer for MarkSentMany.
type Sent struct {
	Key       string
	MessageID string
	Replayed  bool
}

// MarkSentMany records the API's answers in one statement, locking rows in
// id order. A success is recorded whichever job got it, and even over a
// failed state: the API holds the delivery, and a failed row would invite
// an operator to send it again. It returns the keys that were failed
// before, so the caller can say so.
func MarkSentMany(ctx context.Context, db DB, sent []Sent) (overrode []string, err error) {
	keys := make([]string, len(sent))
	ids := make([]string, len(sent))
	replayed := make([]bool, len(sent))
	for i, s := range sent {
		keys[i], ids[i], replayed[i] = s.Key, s.MessageID, s.Replayed
	}
	rows, err := db.Query(ctx, `UPDATE sendonce_outbox o
		SET state = 'sent', message_id = m.message_id, replayed = m.replayed,
			last_error = CASE WHEN l.old_state = 'failed'
				THEN 'sent by an attempt that overlapped the one that parked it: ' || coalesce(o.last_error, '') END,
			sent_at = now(), updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::bool[]) AS m(key, message_id, replayed),
			(SELECT id, state AS old_state FROM sendonce_outbox
			 WHERE idempotency_key = ANY($1) ORDER BY id FOR UPDATE) AS l
		WHERE o.id = l.id AND o.idempotency_key = m.key AND l.old_state IN ('pending', 'sending', 'failed')
		RETURNING o.idempotency_key, l.old_state`, keys, ids, replayed)
	if err != nil {
		return nil, fmt.Errorf("sendstate: mark sent: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var old outbox.State
		if err := rows.Scan(&key, &old); err != nil {
			return nil, fmt.Errorf("sendstate: mark sent: %w", err)
		}
		if old == outbox.StateFailed {
			overrode = append(overrode, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sendstate: mark sent: %w", err)
	}
	return overrode, nil
}

// MarkSent is MarkSentMany for one answer.
func MarkSent(ctx context.Context, db DB, s Sent) (overrode bool, err error) {
	keys, err := MarkSentMany(ctx, db, []Sent{s})
	return len(keys) > 0, err
}

// Outcome is what an attempt that did not succeed leaves on the row.
type Outcome struct {
	Key   string
	JobID int64
	// Reason becomes last_error.
	Reason string
	// Uncertain says the attempt may have reached the API.
	Uncertain bool
	// Snoozed counts one more rate-limit snooze.
	Snoozed bool
}

// MarkFailed parks an intent as failed with the reason. Only the intent's
// own job may.
func MarkFailed(ctx context.Context, db DB, o Outcome) error {
	return update(ctx, db, "mark failed", `UPDATE sendonce_outbox
		SET state = 'failed', last_error = $3, uncertain = uncertain OR $4, updated_at = now()
		WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending')`,
		o.Key, o.JobID, o.Reason, o.Uncertain)
}

// MarkPending puts an intent back to pending after an attempt that will be
// tried again, with what went wrong. Only the intent's own job may.
func MarkPending(ctx context.Context, db DB, o Outcome) error {
	return update(ctx, db, "mark pending", `UPDATE sendonce_outbox
		SET state = 'pending', last_error = $3, uncertain = uncertain OR $4,
			snoozes = snoozes + CASE WHEN $5 THEN 1 ELSE 0 END, updated_at = now()
		WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending')`,
		o.Key, o.JobID, o.Reason, o.Uncertain, o.Snoozed)
}

func update(ctx context.Context, db DB, op, sql string, args ...any) error {
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("sendstate: %s %q: %w", op, args[0], err)
	}
	return nil
}
