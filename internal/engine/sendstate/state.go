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
	"slices"
	"strings"
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

// claimSet is the SET list that claims the row aliased alias, an intent
// or a batch, whose state before the claim the expression was reads: one
// attempt more, uncertain once a claim finds it sending (an attempt before
// may have reached the API), the first attempt's time kept, claimed by the
// owner $3, and the API key's fingerprint $4 recorded unless it is empty or
// the claim is uncertain and an earlier attempt's fingerprint stands (the
// send parks an uncertain intent whose key has changed). ClaimMany and
// claimBatch share it, so that an intent and a batch are claimed by one
// rule.
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
// and the trace context its span links to.
const claimColumns = `id, idempotency_key, kind, payload, coalesce(template_id, ''), state, attempts,
	uncertain, snoozes, coalesce(api_key_fingerprint, ''), job_id, first_attempt_at, suppressed_recipients,
	coalesce(traceparent, ''), coalesce(tracestate, ''), coalesce(topic, ''), list_unsubscribe`

func scanClaimed(row pgx.Row, extra ...any) (*outbox.Record, error) {
	r := &outbox.Record{}
	dest := []any{&r.ID, &r.Key, &r.Kind, &r.Payload, &r.TemplateID, &r.State, &r.Attempts,
		&r.Uncertain, &r.Snoozes, &r.APIKeyFingerprint, &r.JobID, &r.FirstAttemptAt, &r.SuppressedRecipients,
		&r.TraceParent, &r.TraceState, &r.Topic, &r.ListUnsubscribe}
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
	// Owner is the epoch of the claiming worker instance's lease (see
	// Lease), recorded in claimed_by, or 0 for a send without a lease. A
	// claim under a lease that has ended claims nothing and returns
	// ErrLeaseLost.
	Owner int32
	// KeyFingerprint identifies the API key the send will use.
	KeyFingerprint string
	// ReplayWindow is measured from the first attempt, on the database's
	// clock.
	ReplayWindow time.Duration
	// Queue is the queue whose intents ClaimDue claims ("" is
	// outbox.DefaultQueue).
	Queue string
	// CoalesceWait, when positive, is the coalesce wait: ClaimDue holds a
	// due email intent that was never attempted and is in no batch for it
	// and CoalesceGrace, counted from its due time: meanwhile
	// Batcher.FreezeDue may gather it into a batch with others, and only
	// then is the intent claimed alone. Zero: coalescing is off, and
	// nothing is held.
	CoalesceWait time.Duration
}

// Claimed is an intent claimed for one attempt: the fields a send needs.
type Claimed struct {
	Record *outbox.Record
	// WindowLeft is what remains of the replay window, measured by the
	// database's clock at the claim: zero or less when it has run out.
	WindowLeft time.Duration
	// Owner is the lease epoch the claim was made under (ClaimOptions.Owner):
	// the records of this attempt carry it.
	Owner int32
}

// suppressedSQL is the suppressed recipients of outbox row o, sorted, or
// NULL when none is: a subquery over sendonce_suppressed_addresses, which
// PostgreSQL inlines and plans with the statement, one index scan of the
// list per intent (migration 00023). A call of sendonce_suppressed per row
// started a plan of its own and hashed the whole list: with 10,000
// addresses on it a drain cost the database 4 ms per intent instead of
// 0.26 ms. The claim and a batch's first claim store the same array.
const suppressedSQL = `(SELECT array_agg(DISTINCT a ORDER BY a) FROM sendonce_suppressed_addresses(o.kind, o.payload, o.topic) AS a)`

// ClaimMany marks the intents of many jobs as being sent in one statement:
// one more attempt, the first attempt's time stamped (the start of its
// replay window), the owner and API key recorded. An intent left in sending
// by a crashed worker is claimed again, and marked uncertain: that is how a
// crash turns into a replay. The result holds the claims made, by job id; a
// job it does not hold may not send (its intent is settled, gone, or owned
// by another job): ask Peek about it.
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
// With an owner, the claim is made only while the owner's lease is held
// (one more condition, evaluated once per statement); when it claimed fewer
// intents than asked, it reads the lease, and returns ErrLeaseLost if it has
// ended, so the jobs run again instead of taking their intents for settled.
//
// The first claim of an intent (no first attempt yet) looks its recipients
// up on the suppression list and stores what it finds (NULL: none) with
// the claim, so that every attempt sends the same body; with the list empty
// that is one lookup per statement, not per row. An intent with a topic is
// looked up on the unsubscribes of its topic too: an address unsubscribed
// from it is suppressed for it alone. The lookup is suppressedSQL.
//
// The state is checked on the row the key found, never used to find rows:
// `(state IN (…)) IS TRUE` means the same as the bare IN, but no index can
// serve it. A bare IN matches the partial index of unsettled intents, and
// with statistics taken while no intent was unsettled (then 20,000 were
// enqueued) the planner drove the claim from that index, joining each of
// the backlog's rows to the requests: 733 ms for a claim of 100, against
// 1.5 ms by key.
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
// wanted (a nested loop of unique-index probes). MarkSentMany does the
// same.
func ClaimMany(ctx context.Context, db DB, reqs []ClaimRequest, opts ClaimOptions) (map[int64]*Claimed, error) {
	sorted := slices.SortedFunc(slices.Values(reqs), func(a, b ClaimRequest) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	jobIDs := make([]int64, len(sorted))
	for i, r := range sorted {
		keys[i], jobIDs[i] = r.Key, r.JobID
	}
	var owner *int32
	if opts.Owner != 0 {
		owner = &opts.Owner
	}
	reqRows, args := `unnest((SELECT $1::text[]), (SELECT $2::bigint[]))`, []any{keys, jobIDs}
	if len(sorted) == 1 {
		reqRows, args = `(VALUES ($1::text, $2::bigint))`, []any{keys[0], jobIDs[0]}
	}
	rows, err := db.Query(ctx, `UPDATE sendonce_outbox o
		SET `+claimSet("o", "o.state")+`,
			suppressed_recipients = CASE
				WHEN o.first_attempt_at IS NOT NULL THEN o.suppressed_recipients
				WHEN (SELECT EXISTS (SELECT 1 FROM sendonce_suppression))
					OR (o.topic IS NOT NULL AND (SELECT EXISTS (SELECT 1 FROM sendonce_unsubscribe)))
					THEN `+suppressedSQL+` END,
			updated_at = now()
		FROM `+reqRows+` AS r(req_key, req_job_id)
		WHERE o.idempotency_key = r.req_key AND o.job_id = r.req_job_id AND (o.state IN ('pending', 'sending')) IS TRUE
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))
			AND ($3::int4 IS NULL OR `+held("$3::int4")+`)
		RETURNING `+claimColumns+`, extract(epoch FROM first_attempt_at + $5::float8 * interval '1 second' - now())::float8`,
		append(args, owner, opts.KeyFingerprint, opts.ReplayWindow.Seconds())...)
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
		out[*rec.JobID] = &Claimed{Record: rec, WindowLeft: time.Duration(left * float64(time.Second)), Owner: opts.Owner}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sendstate: claim: %w", err)
	}
	if opts.Owner != 0 && len(out) < len(reqs) {
		ok, err := LeaseHeld(ctx, db, opts.Owner)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sendstate: claim: %w", ErrLeaseLost)
		}
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
	// Owner is the lease epoch the attempt was claimed under (Claimed.Owner),
	// or 0 for a send without a lease.
	Owner int32
}

// MarkSentMany records the API's answers in one statement. A success is
// recorded whichever job got it, and even over a failed state: the API
// holds the delivery, and a failed row would invite an operator to send it
// again. It returns the keys that were failed before, so the caller can say
// so.
//
// An answer with an owner is recorded only while the intent's claim is the
// owner's and the owner's lease is held: a worker whose lease ended (paused
// or cut off past it, while a sweeper handed its intents on) records
// nothing over the intent's new owner. notOwned holds such answers' keys,
// and any whose intent was settled already. A failed intent is the one
// exception: its job has given up, no other send of it runs, and the
// success is the truth about it.
//
// Like ClaimMany it is one UPDATE joined to the answers, in key order, with
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
func MarkSentMany(ctx context.Context, db DB, sent []Sent) (overrode, notOwned []string, err error) {
	sorted := slices.SortedFunc(slices.Values(sent), func(a, b Sent) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	ids := make([]string, len(sorted))
	replayed := make([]bool, len(sorted))
	owners := make([]int32, len(sorted))
	for i, s := range sorted {
		keys[i], ids[i], replayed[i], owners[i] = s.Key, s.MessageID, s.Replayed, s.Owner
	}
	answers, args := `unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::bool[]), (SELECT $4::int4[]))`, []any{keys, ids, replayed, owners}
	if len(sorted) == 1 {
		answers, args = `(VALUES ($1::text, $2::text, $3::bool, $4::int4))`, []any{keys[0], ids[0], replayed[0], owners[0]}
	}
	rows, err := db.Query(ctx, `UPDATE sendonce_outbox o
		SET state = 'sent', message_id = m.message_id, replayed = m.replayed,
			last_error = CASE WHEN o.state = 'failed'
				THEN 'sent by an attempt that overlapped the one that parked it: ' || coalesce(o.last_error, '') END,
			sent_at = now(), updated_at = now()
		FROM `+answers+` AS m(key, message_id, replayed, owner)
		WHERE o.idempotency_key = m.key AND (o.state IN ('pending', 'sending', 'failed')) IS TRUE
			AND (o.state = 'failed' OR `+owned("o", "m.owner")+`)
		RETURNING o.idempotency_key, o.last_error IS NOT NULL`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("sendstate: mark sent: %w", err)
	}
	defer rows.Close()
	recorded := make(map[string]bool, len(sorted))
	for rows.Next() {
		var key string
		var wasFailed bool
		if err := rows.Scan(&key, &wasFailed); err != nil {
			return nil, nil, fmt.Errorf("sendstate: mark sent: %w", err)
		}
		recorded[key] = true
		if wasFailed {
			overrode = append(overrode, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sendstate: mark sent: %w", err)
	}
	for _, s := range sorted {
		if s.Owner != 0 && !recorded[s.Key] {
			notOwned = append(notOwned, s.Key)
		}
	}
	return overrode, notOwned, nil
}

// MarkSent is MarkSentMany for one answer. It returns ErrLeaseLost when
// the answer, of an owner, was not recorded (see MarkSentMany).
func MarkSent(ctx context.Context, db DB, s Sent) (overrode bool, err error) {
	keys, notOwned, err := MarkSentMany(ctx, db, []Sent{s})
	if err == nil && len(notOwned) > 0 {
		err = fmt.Errorf("sendstate: mark sent %q: %w", s.Key, ErrLeaseLost)
	}
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
	// Owner is the lease epoch the attempt was claimed under, or 0: with
	// one, the outcome is recorded only while the claim is the owner's and
	// its lease is held (see MarkSentMany).
	Owner int32
	// RetryIn is, for a drained intent (no River job of its own), when
	// MarkPending makes it due again; a River job keeps its own time.
	RetryIn time.Duration
	// RateLimited is what MarkPending records as the intent's 429s in a
	// row, or KeepRateLimited to leave the count as it is.
	RateLimited int
	// GiveBack, for a drained intent, gives the attempt's try back
	// (DrainClaim.Tries): a snooze, or a send cut off by a stop, is no
	// try, as River gives a snoozed job its attempt back.
	GiveBack bool
	// Attempt is, for a batch, the batch's attempt count at the claim
	// (Batch.Attempts), or 0: with one, the outcome is recorded only while
	// no later claim of the batch was made (see ErrSuperseded).
	Attempt int
}

// MarkFailed parks an intent as failed with the reason. Only the intent's
// own job may, and with an owner only under its lease (see MarkSentMany).
func MarkFailed(ctx context.Context, db DB, o Outcome) error {
	return update(ctx, db, "mark failed", `UPDATE sendonce_outbox o
		SET state = 'failed', last_error = $3, uncertain = uncertain OR $4, updated_at = now()
		WHERE idempotency_key = $1 AND `+jobIs("$2")+` AND state IN ('pending', 'sending') AND `+owned("o", "$5::int4"),
		o.Key, o.JobID, o.Reason, o.Uncertain, o.Owner)
}

// MarkPending puts an intent back to pending after an attempt that will be
// tried again, with what went wrong. Only the intent's own job may, and
// with an owner only under its lease (see MarkSentMany).
func MarkPending(ctx context.Context, db DB, o Outcome) error {
	return update(ctx, db, "mark pending", `UPDATE sendonce_outbox o
		SET state = 'pending', last_error = $3, uncertain = uncertain OR $4,
			snoozes = snoozes + CASE WHEN $5 THEN 1 ELSE 0 END,
			next_attempt_at = CASE WHEN job_id IS NULL THEN now() + $7::float8 * interval '1 second' END,
			rate_limited = CASE WHEN $8::int4 < 0 THEN rate_limited ELSE $8::int4 END,
			tries = CASE WHEN $9 AND job_id IS NULL THEN greatest(tries - 1, 0) ELSE tries END, updated_at = now()
		WHERE idempotency_key = $1 AND `+jobIs("$2")+` AND state IN ('pending', 'sending') AND `+owned("o", "$6::int4"),
		o.Key, o.JobID, o.Reason, o.Uncertain, o.Snoozed, o.Owner, o.RetryIn.Seconds(), o.RateLimited, o.GiveBack)
}

// KeepRateLimited, as Outcome.RateLimited, leaves an intent's count of
// 429s in a row as it is.
const KeepRateLimited = -1

// jobIs is the SQL condition that the outbox row's job is the job whose id
// is the int8 parameter p, where 0 names no job: a drained intent's
// (job_id NULL).
func jobIs(p string) string {
	return `job_id IS NOT DISTINCT FROM nullif(` + p + `::int8, 0)`
}

func update(ctx context.Context, db DB, op, sql string, args ...any) error {
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("sendstate: %s %q: %w", op, args[0], err)
	}
	return nil
}

// MarkSuppressed parks an intent whose send must not go out because of the
// suppression list, with the reason, followed by the suppressed addresses
// and why each is on the list (its reason, or "unsubscribed from topic T"). No attempt reached the API (the first
// claim decided it), so the claim is undone: no attempts, no first attempt,
// nothing uncertain; a retry after the address is taken off the list looks
// the recipients up again. Only the intent's own job may, and
// with an owner only under its lease (see MarkSentMany).
func MarkSuppressed(ctx context.Context, db DB, o Outcome) error {
	return update(ctx, db, "mark suppressed", `UPDATE sendonce_outbox o
		SET state = 'suppressed', attempts = 0,
			last_error = $3 || coalesce(': ' || (SELECT string_agg(x.address || ' (' || x.why || ')', ', ' ORDER BY x.address)
				FROM (SELECT s.address, s.reason AS why FROM sendonce_suppression s WHERE s.address = ANY(o.suppressed_recipients)
					UNION ALL
					SELECT u.address, 'unsubscribed from topic ' || u.topic FROM sendonce_unsubscribe u
					WHERE u.address = ANY(o.suppressed_recipients) AND u.topic = o.topic
						AND NOT EXISTS (SELECT 1 FROM sendonce_suppression s WHERE s.address = u.address)) x), ''), first_attempt_at = NULL, uncertain = false,
			api_key_fingerprint = NULL, updated_at = now()
		WHERE idempotency_key = $1 AND `+jobIs("$2")+` AND state IN ('pending', 'sending') AND `+owned("o", "$4::int4"),
		o.Key, o.JobID, o.Reason, o.Owner)
}
