package store

import (
	"context"
	"time"
)

// The records of an attempt's outcome on an intent, as the worker's engine
// (internal/engine/sendstate) writes them: sent (MarkIntentsSent), or not
// (MarkIntentFailed, MarkIntentPending, MarkIntentSuppressed). A batch's are
// in engine_batch.go.

// Outcome is what an attempt that did not succeed leaves on its row.
type Outcome struct {
	Key   string
	JobID int64
	// Reason becomes last_error.
	Reason string
	// Uncertain says the attempt may have reached the API.
	Uncertain bool
	// Snoozed counts one more rate-limit snooze.
	Snoozed bool
	// Owner is the lease epoch the attempt was claimed under, or 0: with
	// one, the outcome is recorded only while the claim is the owner's and
	// its lease is held (see sendstate.MarkSentMany).
	Owner int32
	// RetryIn is, for a drained intent (no River job of its own), when
	// sendstate.MarkPending makes it due again; a River job keeps its own time.
	RetryIn time.Duration
	// RateLimited is what sendstate.MarkPending records as the intent's 429s in a
	// row, or KeepRateLimited to leave the count as it is.
	RateLimited int
	// GiveBack, for a drained intent, gives the attempt's try back
	// (sendstate.DrainClaim.Tries): a snooze, or a send cut off by a stop, is no
	// try, as River gives a snoozed job its attempt back.
	GiveBack bool
	// Attempt is, for a batch, the batch's attempt count at the claim
	// (sendstate.Batch.Attempts), or 0: with one, the outcome is recorded only while
	// no later claim of the batch was made (see sendstate.ErrSuperseded).
	Attempt int
}

// SentMark is an answer MarkIntentsSent recorded: the intent's key, and
// whether it was failed before.
type SentMark struct {
	Key       string
	WasFailed bool
	// The row's, read only when MarkIntentsSent is asked for them (a
	// status hook's): its kind, run key, tenant, the payload's tags (a
	// JSON object, or nil) and the message id recorded.
	Kind, RunKey, Tenant, MessageID string
	Tags                            []byte
}

// markSentSQL is MarkIntentsSent's statement, joined to the answers
// (rows of (key, message_id, replayed, owner) from $1 to $4); with
// asyncCommit, its transaction commits without waiting for the WAL flush
// (see MarkIntentsSent).
//
// Like claimSQL it is one UPDATE joined to the answers, in key order, with
// its state check written so that no index can serve it. The form it
// replaces locked the rows in a subquery first (FOR UPDATE, in id order) to
// read their old state. The planner pushed the state predicate down into
// that subquery and, with the statistics of a freshly filled table,
// answered `idempotency_key = ANY($1) AND state IN (…)` with a BitmapAnd
// over the (state, created_at) index: every call read the index entries of
// the whole backlog. In the drain benchmark (20,000 intents) rewriting both
// statements took the database's CPU per intent from 204 µs to 147 µs
// (medians of 4 runs).
//
// PostgreSQL 15's UPDATE cannot return a column's old value, so whether the
// row was failed is read back from the last_error the SET list wrote: it is
// set exactly when the row was failed, and NULL otherwise.
//
// It keeps the tallies itself (selfTallied), as the statement trigger
// would: each intent out of its state before (pending and sending are
// counted alike, under pending; or failed) and into sent at its minute,
// and for the members of runs the same by second. The delivery status and
// the run key are the row's, which the mark does not change.
func markSentSQL(answers string, asyncCommit, status bool) string {
	// The answers alone (asyncCommit) commit without waiting for the WAL
	// flush, unless one of them overrode a failed intent: lost to a crash,
	// that record would leave it failed, though its email went out, where
	// a lost record of a sending intent has it sent again under its key.
	statusColumns, statusOut := "", ""
	if status {
		statusColumns = `, ` + statusSQL
		statusOut = `, kind, coalesce(run_key, ''), tenant, message_id, tags`
	}
	from := `m`
	if asyncCommit {
		from = `m, (SELECT set_config('synchronous_commit',
			CASE WHEN bool_or(was_failed) THEN current_setting('synchronous_commit') ELSE 'off' END, true) FROM m) AS c`
	}
	return `WITH m AS (
		UPDATE sendonce_outbox o
		SET state = 'sent', message_id = m.message_id, replayed = m.replayed,
			last_error = CASE WHEN o.state = 'failed'
				THEN 'sent by an attempt that overlapped the one that parked it: ' || coalesce(o.last_error, '') END,
			sent_at = now(), updated_at = now()
		FROM ` + answers + ` AS m(key, message_id, replayed, owner)
		WHERE o.idempotency_key = m.key AND (o.state IN ('pending', 'sending', 'failed')) IS TRUE
			AND (o.state = 'failed' OR ` + owned("o", "m.owner") + `)
		RETURNING o.idempotency_key AS key, o.last_error IS NOT NULL AS was_failed, o.run_key,
			coalesce(o.delivery_status, '') AS delivery_status, ` + selfTallied + statusColumns + `),
	t AS (
		INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
		SELECT v.minute, v.state, m.delivery_status, sum(v.n) FROM m,
			LATERAL (VALUES (NULL::timestamptz, CASE WHEN m.was_failed THEN 'failed' ELSE 'pending' END, -1),
				(date_trunc('minute', now()), 'sent', 1)) AS v(minute, state, n)
		GROUP BY 1, 2, 3),
	r AS (
		INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
		SELECT m.run_key, v.at, v.state, m.delivery_status, sum(v.n) FROM m,
			LATERAL (VALUES (NULL::timestamptz, CASE WHEN m.was_failed THEN 'failed' ELSE 'pending' END, -1),
				(date_trunc('second', now()), 'sent', 1)) AS v(at, state, n)
		WHERE m.run_key IS NOT NULL
		GROUP BY 1, 2, 3, 4)
	SELECT key, was_failed` + statusOut + ` FROM ` + from
}

// markSentOneSQL and markSentManySQL are MarkIntentsSent's statement for
// one answer and for many: a one-row VALUES, and arrays unnested through
// scalar subqueries, so that both keep a generic plan (see claimOneSQL).
// The Async ones commit without waiting for the WAL flush.
// The Status ones also return what a status hook is told of (statusSQL).
var (
	markSentOne  = `(VALUES ($1::text, $2::text, $3::bool, $4::int4))`
	markSentMany = `unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::bool[]), (SELECT $4::int4[]))`

	markSentOneSQL             = markSentSQL(markSentOne, false, false)
	markSentManySQL            = markSentSQL(markSentMany, false, false)
	markSentOneAsyncSQL        = markSentSQL(markSentOne, true, false)
	markSentManyAsyncSQL       = markSentSQL(markSentMany, true, false)
	markSentOneStatusSQL       = markSentSQL(markSentOne, false, true)
	markSentManyStatusSQL      = markSentSQL(markSentMany, false, true)
	markSentOneAsyncStatusSQL  = markSentSQL(markSentOne, true, true)
	markSentManyAsyncStatusSQL = markSentSQL(markSentMany, true, true)
)

// statusSQL is what a statement recording a transition of the outbox row
// aliased o returns for a status hook: its kind, tenant (” for the
// default), message id (” before one) and the payload's tags when they
// are a JSON object. Only the texts for a hook read them: the tags cost a
// read of the payload.
const statusSQL = `o.kind, coalesce(o.tenant, '') AS tenant, coalesce(o.message_id, '') AS message_id,
	CASE WHEN jsonb_typeof(o.payload -> 'tags') = 'object' THEN o.payload -> 'tags' END AS tags`

// MarkIntentsSent records the API's answers in one statement: the intent
// of keys[i] sent with messageIDs[i], replayed[i], by the attempt claimed
// under owners[i] (0: none), the answers in key order (the caller sorts
// them). A pending, sending or failed intent is recorded; with an owner,
// one that is not failed only while its claim is the owner's and the
// lease is held. It returns the answers it recorded.
//
// With asyncCommit, and db a pool (the statement its own transaction),
// the commit does not wait for its WAL to reach the disk
// (synchronous_commit off for this transaction alone): the flush cost a
// lone mark about as much of the server's CPU as the statement itself. A
// crash of the database can then lose a mark it had acknowledged, for at
// most three times wal_writer_delay; the intent is then sending under
// its claim, and goes out again under its key, which the API replays.
// An answer that overrides a failed intent keeps the commit waiting for
// the flush: lost, it would leave the intent failed, its email sent. The
// claim, which must be durable before the send, is never made so.
// In a transaction of the caller's, asyncCommit applies to its commit:
// pass false there.
//
// With status, each mark also holds what a status hook is told of.
func MarkIntentsSent(ctx context.Context, db DB, keys, messageIDs []string, replayed []bool, owners []int32, asyncCommit, status bool) ([]SentMark, error) {
	one, many := markSentOneSQL, markSentManySQL
	switch {
	case asyncCommit && status:
		one, many = markSentOneAsyncStatusSQL, markSentManyAsyncStatusSQL
	case asyncCommit:
		one, many = markSentOneAsyncSQL, markSentManyAsyncSQL
	case status:
		one, many = markSentOneStatusSQL, markSentManyStatusSQL
	}
	sql, args := many, []any{keys, messageIDs, replayed, owners}
	if len(keys) == 1 {
		sql, args = one, []any{keys[0], messageIDs[0], replayed[0], owners[0]}
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]SentMark, 0, len(keys))
	for rows.Next() {
		var m SentMark
		dest := []any{&m.Key, &m.WasFailed}
		if status {
			dest = append(dest, &m.Kind, &m.RunKey, &m.Tenant, &m.MessageID, &m.Tags)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// jobIs is the SQL condition that the outbox row's job is the job whose id
// is the int8 parameter p, where 0 names no job: a drained intent's
// (job_id NULL).
func jobIs(p string) string {
	return `job_id IS NOT DISTINCT FROM nullif(` + p + `::int8, 0)`
}

// markFailedSQL is MarkIntentFailed's statement.
var markFailedSQL = `UPDATE sendonce_outbox o
		SET state = 'failed', last_error = $3, uncertain = uncertain OR $4, updated_at = now()
		WHERE idempotency_key = $1 AND ` + jobIs("$2") + ` AND state IN ('pending', 'sending') AND ` + owned("o", "$5::int4")

// markFailedStatusSQL is markFailedSQL returning what a status hook is
// told of.
var markFailedStatusSQL = markFailedSQL + statusReturning

// MarkIntentFailed parks the intent o.Key as failed with o.Reason (and
// uncertain with o.Uncertain), if it is pending or sending, its job is
// o.JobID (0: none), and with an owner, its claim is o.Owner's and the
// lease is held. With status, it returns the intent parked (none when it
// parked none), for a status hook.
func MarkIntentFailed(ctx context.Context, db DB, o Outcome, status bool) ([]StatusRow, error) {
	if status {
		return queryStatusRows(ctx, db, markFailedStatusSQL, o.Key, o.JobID, o.Reason, o.Uncertain, o.Owner)
	}
	_, err := db.Exec(ctx, markFailedSQL, o.Key, o.JobID, o.Reason, o.Uncertain, o.Owner)
	return nil, err
}

// markPendingSQL is MarkIntentPending's statement.
var markPendingSQL = `UPDATE sendonce_outbox o
		SET state = 'pending', last_error = $3, uncertain = uncertain OR $4,
			snoozes = snoozes + CASE WHEN $5 THEN 1 ELSE 0 END,
			next_attempt_at = CASE WHEN job_id IS NULL THEN now() + $7::float8 * interval '1 second' END,
			rate_limited = CASE WHEN $8::int4 < 0 THEN rate_limited ELSE $8::int4 END,
			tries = CASE WHEN $9 AND job_id IS NULL THEN greatest(tries - 1, 0) ELSE tries END, updated_at = now()
		WHERE idempotency_key = $1 AND ` + jobIs("$2") + ` AND state IN ('pending', 'sending') AND ` + owned("o", "$6::int4")

// MarkIntentPending puts the intent o.Key back to pending, under the
// conditions of MarkIntentFailed, with o.Reason, one more snooze with
// o.Snoozed, o.RateLimited as its 429s in a row (below zero: kept as they
// are), and for a drained intent (no job), due again in o.RetryIn and,
// with o.GiveBack, its try given back.
func MarkIntentPending(ctx context.Context, db DB, o Outcome) error {
	_, err := db.Exec(ctx, markPendingSQL, o.Key, o.JobID, o.Reason, o.Uncertain, o.Snoozed, o.Owner, o.RetryIn.Seconds(), o.RateLimited, o.GiveBack)
	return err
}

// markSuppressedSQL is MarkIntentSuppressed's statement.
var markSuppressedSQL = `UPDATE sendonce_outbox o
		SET state = 'suppressed', attempts = 0,
			last_error = $3 || coalesce(': ' || (SELECT string_agg(x.address || ' (' || x.why || ')', ', ' ORDER BY x.address)
				FROM (SELECT s.address, s.reason AS why FROM sendonce_suppression s WHERE s.address = ANY(o.suppressed_recipients)
					UNION ALL
					SELECT u.address, 'unsubscribed from topic ' || u.topic FROM sendonce_unsubscribe u
					WHERE u.address = ANY(o.suppressed_recipients) AND u.topic = o.topic
						AND NOT EXISTS (SELECT 1 FROM sendonce_suppression s WHERE s.address = u.address)) x), ''), first_attempt_at = NULL, uncertain = false,
			api_key_fingerprint = NULL, updated_at = now()
		WHERE idempotency_key = $1 AND ` + jobIs("$2") + ` AND state IN ('pending', 'sending') AND ` + owned("o", "$4::int4")

// MarkIntentSuppressed parks the intent o.Key as suppressed, under the
// conditions of MarkIntentFailed, with o.Reason followed by its suppressed
// recipients and why each is on the list, and undoes its claim (no
// attempts, no first attempt, not uncertain, no API key).
// With status, it returns the intent parked, for a status hook.
func MarkIntentSuppressed(ctx context.Context, db DB, o Outcome, status bool) ([]StatusRow, error) {
	if status {
		return queryStatusRows(ctx, db, markSuppressedStatusSQL, o.Key, o.JobID, o.Reason, o.Owner)
	}
	_, err := db.Exec(ctx, markSuppressedSQL, o.Key, o.JobID, o.Reason, o.Owner)
	return nil, err
}

// markSuppressedStatusSQL is markSuppressedSQL returning what a status
// hook is told of.
var markSuppressedStatusSQL = markSuppressedSQL + statusReturning

// StatusRow is an outbox row a statement moved, as a status hook is told
// of it (see statusSQL).
type StatusRow struct {
	Key, Kind, RunKey, Tenant, MessageID string
	Tags                                 []byte
}

// statusReturning is the RETURNING clause of a statement on the outbox
// row aliased o that returns StatusRows.
const statusReturning = `
		RETURNING o.idempotency_key, o.kind, coalesce(o.run_key, ''), ` + statusSQL

// queryStatusRows runs sql, which returns StatusRows, and reads them.
func queryStatusRows(ctx context.Context, db DB, sql string, args ...any) ([]StatusRow, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StatusRow
	for rows.Next() {
		var r StatusRow
		if err := rows.Scan(&r.Key, &r.Kind, &r.RunKey, &r.Tenant, &r.MessageID, &r.Tags); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
