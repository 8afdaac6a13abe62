package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The claim of an intent for one attempt, as the worker's engine
// (internal/engine/sendstate) makes it: by its River job (ClaimIntents),
// and a look at an intent a job could not claim (PeekIntent). A drain's
// claim is ClaimDueIntents (engine_drain.go), a batch's ClaimBatch
// (engine_batch.go).

// claimSet is the SET list that claims the row aliased alias, an intent
// or a batch, whose state before the claim the expression was reads: one
// attempt more, uncertain once a claim finds it sending (an attempt before
// may have reached the API), the first attempt's time kept, claimed by the
// owner $3, and the API key's fingerprint $4 recorded unless it is empty or
// the claim is uncertain and an earlier attempt's fingerprint stands (the
// send parks an uncertain intent whose key has changed). ClaimIntents,
// ClaimDueIntents and ClaimBatch share it, so that an intent and a batch
// are claimed by one rule.
func claimSet(alias, was string) string {
	return `state = 'sending', attempts = ` + alias + `.attempts + 1,
			uncertain = ` + alias + `.uncertain OR ` + was + ` = 'sending',
			first_attempt_at = coalesce(` + alias + `.first_attempt_at, now()),
			claimed_by = $3,
			api_key_fingerprint = CASE
				WHEN $4 = '' THEN ` + alias + `.api_key_fingerprint
				WHEN ` + alias + `.uncertain OR ` + was + ` = 'sending' THEN coalesce(` + alias + `.api_key_fingerprint, $4)
				ELSE $4 END`
}

// claimColumns is what a claim returns of an intent: what a send needs,
// and the trace context its span links to. scanClaimed reads them.
const claimColumns = `id, idempotency_key, kind, payload, coalesce(template_id, ''), state, attempts,
	uncertain, snoozes, coalesce(api_key_fingerprint, ''), job_id, first_attempt_at, suppressed_recipients,
	coalesce(traceparent, ''), coalesce(tracestate, ''), coalesce(topic, ''), list_unsubscribe`

// scanClaimed reads claimColumns into in, and then extra.
func scanClaimed(row pgx.Row, in *Intent, extra ...any) error {
	dest := []any{&in.ID, &in.Key, &in.Kind, &in.Payload, &in.TemplateID, &in.State, &in.Attempts,
		&in.Uncertain, &in.Snoozes, &in.APIKeyFingerprint, &in.JobID, &in.FirstAttemptAt, &in.SuppressedRecipients,
		&in.TraceParent, &in.TraceState, &in.Topic, &in.ListUnsubscribe}
	return row.Scan(append(dest, extra...)...)
}

// suppressedSQL is the suppressed recipients of outbox row o, sorted, or
// NULL when none is: a subquery over sendonce_suppressed_addresses, which
// PostgreSQL inlines and plans with the statement, one index scan of the
// list per intent (migration 00023). A call of sendonce_suppressed per row
// started a plan of its own and hashed the whole list: with 10,000
// addresses on it a drain cost the database 4 ms per intent instead of
// 0.26 ms. The claim and a batch's first claim store the same array.
const suppressedSQL = `(SELECT array_agg(DISTINCT a ORDER BY a) FROM sendonce_suppressed_addresses(o.kind, o.payload, o.topic) AS a)`

// ClaimedIntent is an intent a claim took: its claimed columns
// (claimColumns; the Intent's other fields stay zero) and what remains of
// its replay window, by the database's clock at the claim. RateLimited,
// RunKey and Tries are ClaimDueIntents' alone.
type ClaimedIntent struct {
	Intent
	WindowLeft  time.Duration
	RateLimited int
	RunKey      string
	Tries       int
	Tenant      string // "" for the default tenant
}

// claimSQL is ClaimIntents' statement, joined to the requests reqs (rows
// of (req_key, req_job_id) from $1 and $2).
//
// It is one plain UPDATE joined to the requests: each row is found through
// the unique key index, then locked and checked by the UPDATE itself (after
// a concurrent change PostgreSQL checks the new version again), and the SET
// list reads the state the row had before. The form it replaces locked the
// rows in a CTE first (SELECT … FOR UPDATE) and updated them after: a second
// visit to every row and a lock record in the WAL for each. The requests go
// in key order, and the plan walks them in that order (a nested loop over
// the unnested arrays, one unique-index probe each), so concurrent batches
// lock their rows in one order; should two ever deadlock all the same,
// PostgreSQL cancels one statement and its jobs run again.
//
// With an owner ($3), the claim is made only while the owner's lease is
// held: one more condition, evaluated once per statement.
//
// The first claim of an intent (no first attempt yet) looks its recipients
// up on the suppression list (suppressedSQL) and stores what it finds
// (NULL: none) with the claim; with the list empty that is one lookup per
// statement, not per row. An intent with a topic is looked up on the
// unsubscribes of its topic too.
//
// The state is checked on the row the key found, never used to find rows:
// `(state IN (…)) IS TRUE` means the same as the bare IN, but no index can
// serve it. A bare IN matches the partial index of unsettled intents, and
// with statistics taken while no intent was unsettled (then 20,000 were
// enqueued) the planner drove the claim from that index, joining each of
// the backlog's rows to the requests: 733 ms for a claim of 100, against
// 1.5 ms by key.
// claimSuppressedSet is the SET item of a claim (claimSQL, claimDueSQL) that
// looks the intent's recipients up on the suppression list and in its
// topic's unsubscribes at its first claim, and keeps what the first claim
// found at every later one; the lookups run only when either table holds
// a row.
var claimSuppressedSet = `suppressed_recipients = CASE
				WHEN o.first_attempt_at IS NOT NULL THEN o.suppressed_recipients
				WHEN (SELECT EXISTS (SELECT 1 FROM sendonce_suppression))
					OR (o.topic IS NOT NULL AND (SELECT EXISTS (SELECT 1 FROM sendonce_unsubscribe)))
					THEN ` + suppressedSQL + ` END,`

func claimSQL(reqs string) string {
	return `UPDATE sendonce_outbox o
		SET ` + claimSet("o", "o.state") + `,
			` + claimSuppressedSet + `
			updated_at = now()
		FROM ` + reqs + ` AS r(req_key, req_job_id)
		WHERE o.idempotency_key = r.req_key AND o.job_id = r.req_job_id AND (o.state IN ('pending', 'sending')) IS TRUE
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))
			AND ($3::int4 IS NULL OR ` + held("$3::int4") + `)
		RETURNING ` + claimColumns + `, extract(epoch FROM first_attempt_at + $5::float8 * interval '1 second' - now())::float8`
}

// claimOneSQL and claimManySQL are ClaimIntents' statement for one request
// and for many.
//
// A claim of one request (the common case: one job, one intent) joins a
// one-row VALUES instead of the unnested arrays. The planner estimates an
// unnest of a parameter at many rows, so its generic plan never looked
// cheaper than a custom one and every call was planned again; planning
// cost more than the execution (issue 23: in the rate-limited benchmark,
// 0.48 ms of planning against 0.19 ms of execution per claim). A one-row
// VALUES has the same estimate either way, and the prepared statement
// keeps its generic plan. A claim of many unnests its arrays through
// scalar subqueries, for the same reason: the planner cannot see into
// (SELECT $1::text[]) in a custom plan either, so both plans estimate the
// same rows, the generic one wins after five calls, and a drain's claims
// of 100 are no longer planned one by one. The plan it keeps is the one
// wanted (a nested loop of unique-index probes). MarkIntentsSent does the
// same.
var (
	claimOneSQL  = claimSQL(`(VALUES ($1::text, $2::bigint))`)
	claimManySQL = claimSQL(`unnest((SELECT $1::text[]), (SELECT $2::bigint[]))`)
)

// ClaimIntents claims, in one statement, the intents named by keys, each
// for the River job of the same index in jobIDs (the requests in key
// order: the caller sorts them), under owner's lease (0: none), with the
// API key's fingerprint, and returns the claims it made (a request it does
// not hold may not send: its intent is settled, gone, another job's, of a
// paused run, or the lease is not held). window is the replay window, from
// the first attempt. See claimSQL.
func ClaimIntents(ctx context.Context, db DB, keys []string, jobIDs []int64, owner int32, fingerprint string, window time.Duration) ([]ClaimedIntent, error) {
	sql, args := claimManySQL, []any{keys, jobIDs}
	if len(keys) == 1 {
		sql, args = claimOneSQL, []any{keys[0], jobIDs[0]}
	}
	rows, err := db.Query(ctx, sql, append(args, engineOwner(owner), fingerprint, window.Seconds())...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]ClaimedIntent, 0, len(keys))
	for rows.Next() {
		var c ClaimedIntent
		var left float64
		if err := scanClaimed(rows, &c.Intent, &left); err != nil {
			return nil, err
		}
		c.WindowLeft = engineSeconds(left)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// peekIntentSQL is PeekIntent's statement.
const peekIntentSQL = `SELECT state, kind, job_id FROM sendonce_outbox WHERE idempotency_key = $1`

// PeekIntent reads where the intent of key stands: its state, kind and
// River job. It returns pgx.ErrNoRows when there is none. It reads three
// columns, not the whole intent: a job that could not claim its intent
// asks.
func PeekIntent(ctx context.Context, db DB, key string) (state, kind string, jobID *int64, err error) {
	err = db.QueryRow(ctx, peekIntentSQL, key).Scan(&state, &kind, &jobID)
	return state, kind, jobID, err
}

// engineOwner is a lease epoch as a claim's $3: NULL for 0 (no lease).
func engineOwner(owner int32) *int32 {
	if owner == 0 {
		return nil
	}
	return &owner
}

// engineSeconds is a float8 of seconds a statement returned, as a
// time.Duration.
func engineSeconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// engineNoRows reports whether err is pgx.ErrNoRows: a statement that found no
// row.
func engineNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows)
}
