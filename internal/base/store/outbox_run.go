package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/internal/base/sendjob"
)

// The statements of package outbox's runs (run.go): a run's row in
// sendonce_run, and the operations on its members.

// outboxCreateRunSQL makes run $1 (send_at $2, topic $3, tenant $4) if it
// is not there, and reads its state and tenant. The run's row is read FOR SHARE, which
// conflicts with CancelRun's lock and update of it (issue 22): read
// plainly, a run canceled while this statement waited for it was read
// active, and the new members went in pending after the cancel. Now a
// cancel under way is waited for and its state read; a cancel that comes
// later waits for this transaction and cancels its members with the
// others.
const outboxCreateRunSQL = `WITH i AS (
			INSERT INTO sendonce_run (key, send_at, topic, tenant, breaker_bounce_rate, breaker_complaint_rate, breaker_min_outcomes)
			VALUES ($1, $2, nullif($3, ''), nullif($4, ''), $5, $6, $7)
			ON CONFLICT (key) DO NOTHING RETURNING state, tenant)
		SELECT true, state, coalesce(tenant, '') FROM i UNION ALL
		SELECT false, state, coalesce(tenant, '') FROM (SELECT state, tenant FROM sendonce_run WHERE key = $1 FOR SHARE) r
		WHERE NOT EXISTS (SELECT 1 FROM i)`

// CreateRun makes the run with key key if it is not there (outboxCreateRunSQL),
// with the breaker's settings b (its thresholds and minimum; see
// RunBreakerRow), and returns whether it made it, the run's state, read
// FOR SHARE, and its tenant ("": the default tenant). The error is the
// database's, unwrapped.
func CreateRun(ctx context.Context, db DB, key string, sendAt *time.Time, topic, tenant string, b RunBreakerRow) (created bool, state, runTenant string, _ error) {
	err := db.QueryRow(ctx, outboxCreateRunSQL, key, sendAt, topic, tenant, b.BounceRate, b.ComplaintRate, b.MinOutcomes).Scan(&created, &state, &runTenant)
	return created, state, runTenant, err
}

// outboxAnyNewKeySQL tells whether one of the keys $1 has no intent.
const outboxAnyNewKeySQL = `SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) k
			WHERE NOT EXISTS (SELECT 1 FROM sendonce_outbox WHERE idempotency_key = k))`

// AnyNewKey reports whether one of keys names no intent. The error is the
// database's, unwrapped.
func AnyNewKey(ctx context.Context, db DB, keys []string) (bool, error) {
	var missing bool
	err := db.QueryRow(ctx, outboxAnyNewKeySQL, keys).Scan(&missing)
	return missing, err
}

// RunRow is a row of sendonce_run.
type RunRow struct {
	Key, State           string
	SendAt               *time.Time
	Schedule             string // the schedule that made it, or ""
	Tenant               string // "": the default tenant
	Occurrence           *time.Time
	CreatedAt, UpdatedAt time.Time
	Breaker              RunBreakerRow
}

// RunBreakerRow is a run's bounce-rate breaker (migration 00033): its
// settings, the reason it paused the run, its last trip and its counts.
type RunBreakerRow struct {
	// BounceRate and ComplaintRate are the thresholds (nil: not watched).
	BounceRate, ComplaintRate *float64
	MinOutcomes               int
	ChangedAt                 *time.Time
	// PauseReason is set while the breaker holds the run paused.
	PauseReason string
	TrippedAt   *time.Time
	// TripKnown, TripHard and TripComplained are the figures of the last
	// trip (0 before any).
	TripKnown, TripHard, TripComplained int64
	// Known, Hard and Complained count the members' outcomes since the
	// last resume from a trip (since the start before any).
	Known, Hard, Complained int64
}

// outboxRunsSQL reads the runs that rest selects (a WHERE, ORDER BY or
// LIMIT clause over sendonce_run), with their breakers' counts (at most
// 16 rows of sendonce_run_outcome a run).
func outboxRunsSQL(rest string) string {
	return `SELECT key, state, send_at, coalesce(schedule_name, ''), occurrence, created_at, updated_at, coalesce(tenant, ''),
			breaker_bounce_rate, breaker_complaint_rate, breaker_min_outcomes, breaker_changed_at,
			coalesce(pause_reason, ''), breaker_tripped_at, coalesce(breaker_trip_known, 0),
			coalesce(breaker_trip_hard, 0), coalesce(breaker_trip_complained, 0),
			coalesce(n.known, 0) - breaker_since_known, coalesce(n.hard, 0) - breaker_since_hard,
			coalesce(n.complained, 0) - breaker_since_complained
		FROM sendonce_run r LEFT JOIN LATERAL (SELECT sum(known) AS known, sum(hard) AS hard, sum(complained) AS complained
			FROM sendonce_run_outcome o WHERE o.run_key = r.key) n ON true ` + rest
}

// outboxReadRuns runs outboxRunsSQL(rest) with args.
func outboxReadRuns(ctx context.Context, db DB, rest string, args ...any) ([]RunRow, error) {
	rows, err := db.Query(ctx, outboxRunsSQL(rest), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunRow, error) {
		var x RunRow
		b := &x.Breaker
		err := r.Scan(&x.Key, &x.State, &x.SendAt, &x.Schedule, &x.Occurrence, &x.CreatedAt, &x.UpdatedAt, &x.Tenant,
			&b.BounceRate, &b.ComplaintRate, &b.MinOutcomes, &b.ChangedAt, &b.PauseReason, &b.TrippedAt,
			&b.TripKnown, &b.TripHard, &b.TripComplained, &b.Known, &b.Hard, &b.Complained)
		return x, err
	})
}

// NewestRuns reads the limit newest runs, newest first. The error is the
// database's, unwrapped.
func NewestRuns(ctx context.Context, db DB, limit int) ([]RunRow, error) {
	return outboxReadRuns(ctx, db, `ORDER BY created_at DESC, key LIMIT $1`, limit)
}

// RunByKey reads the run with key key: one row, or none. The error is the
// database's, unwrapped.
func RunByKey(ctx context.Context, db DB, key string) ([]RunRow, error) {
	return outboxReadRuns(ctx, db, `WHERE key = $1`, key)
}

// RunTally is a row of RunTallies.
type RunTally struct {
	RunKey, State, Delivery string
	// N counts the members; Recent those of them sent in the last minute.
	N, Recent int64
	// Live: N counts the run's sending members, from the table.
	Live bool
}

// outboxRunTallySQL counts the members of the runs $1 from the runs'
// tally (see migration 00022), a few rows a run whatever its size; the
// sends of the last minute from its per-second buckets of sent_at. The
// tally counts pending and sending members together, as pending (migration
// 00028); the sending ones, few, are counted from the table in the same
// statement (live), so as of the same snapshot, for the caller to take
// from them.
const outboxRunTallySQL = `SELECT run_key, state, delivery_status, sum(n)::bigint,
			coalesce(sum(n) FILTER (WHERE at > now() - interval '1 minute'), 0)::bigint, false
		FROM sendonce_run_tally WHERE run_key = ANY($1) GROUP BY run_key, state, delivery_status
		UNION ALL
		SELECT run_key, 'sending', '', count(*), 0, true
		FROM sendonce_outbox WHERE state = 'sending' AND run_key = ANY($1) GROUP BY run_key`

// RunTallies calls each with every row of outboxRunTallySQL for the runs
// keys. The error is the database's, unwrapped.
func RunTallies(ctx context.Context, db DB, keys []string, each func(RunTally)) error {
	rows, err := db.Query(ctx, outboxRunTallySQL, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t RunTally
		if err := rows.Scan(&t.RunKey, &t.State, &t.Delivery, &t.N, &t.Recent, &t.Live); err != nil {
			return err
		}
		each(t)
	}
	return rows.Err()
}

// outboxLockRunSQL locks run $1 and reads its state.
const outboxLockRunSQL = `SELECT state FROM sendonce_run WHERE key = $1 FOR UPDATE`

// LockRunForUpdate locks the run with key key (FOR UPDATE) and returns its state.
// Its error is pgx.ErrNoRows when there is no such run, unwrapped.
func LockRunForUpdate(ctx context.Context, db DB, key string) (string, error) {
	var state string
	err := db.QueryRow(ctx, outboxLockRunSQL, key).Scan(&state)
	return state, err
}

// outboxSetRunStateSQL moves run $1 to state $2; the breaker's reason
// for a pause goes with the pause.
const outboxSetRunStateSQL = `UPDATE sendonce_run SET state = $2, updated_at = now(),
			pause_reason = CASE WHEN $2 = 'paused' THEN pause_reason END WHERE key = $1`

// SetRunState moves the (locked) run with key key to state. The error is
// the database's, unwrapped.
func SetRunState(ctx context.Context, db DB, key, state string) error {
	_, err := db.Exec(ctx, outboxSetRunStateSQL, key, state)
	return err
}

// outboxRunToDrainSQL hands the run's members still to send whose River
// job of their own (from a release before the drain) ended to the drain.
const outboxRunToDrainSQL = `UPDATE sendonce_outbox o SET job_id = NULL, updated_at = now()
		FROM (SELECT o.id FROM sendonce_outbox o LEFT JOIN river_job j ON j.id = o.job_id
			WHERE o.run_key = $1 AND o.state = 'pending' AND o.batch_key IS NULL AND o.job_id IS NOT NULL
				AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
			ORDER BY o.id FOR UPDATE OF o) m
		WHERE o.id = m.id`

// RunMembersToDrain hands the members of run key still to send whose
// River job of their own (from a release before the drain) is gone or
// ended to the drain (job_id NULL). The error is the database's,
// unwrapped.
func RunMembersToDrain(ctx context.Context, db DB, key string) error {
	_, err := db.Exec(ctx, outboxRunToDrainSQL, key)
	return err
}

// outboxRunLostBatchesSQL locks the frozen batches of run $1 whose job is
// gone or ended; outboxRunBatchJobsSQL names their new jobs ($2) on them
// ($1) and on their members.
const (
	outboxRunLostBatchesSQL = `SELECT b.id, b.idempotency_key, b.queue FROM sendonce_batch b
		LEFT JOIN river_job j ON j.id = b.job_id
		WHERE b.run_key = $1 AND b.state IN ('pending', 'sending')
			AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
		ORDER BY b.id FOR UPDATE OF b`
	outboxRunBatchJobsSQL = `WITH b AS (
			UPDATE sendonce_batch b SET job_id = u.job_id, updated_at = now()
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id) WHERE b.id = u.id
			RETURNING b.idempotency_key, b.member_keys, b.job_id)
		UPDATE sendonce_outbox o SET job_id = b.job_id, updated_at = now()
		FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key
			AND o.state IN ('pending', 'sending')`
)

// GiveRunBatchJobs gives a new River job (through rc, in tx; see
// sendjob.Give) to every frozen batch of run key whose job is gone or
// ended, job making each batch's job from its key and queue. It returns how
// many it gave jobs to. The error is the database's or River's.
func GiveRunBatchJobs(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], key string,
	job func(batchKey, queue string) river.InsertManyParams) (int, error) {
	return sendjob.Give(ctx, tx, rc, outboxRunLostBatchesSQL, []any{key},
		func(rows pgx.Rows) (int64, river.InsertManyParams, error) {
			var id int64
			var k, queue string
			err := rows.Scan(&id, &k, &queue)
			return id, job(k, queue), err
		}, outboxRunBatchJobsSQL)
}

// outboxCancelRunBatchesSQL cancels the frozen batches of run $1 not yet
// attempted.
const outboxCancelRunBatchesSQL = `WITH b AS (
				SELECT id FROM sendonce_batch WHERE run_key = $1 AND state = 'pending' AND attempts = 0 ORDER BY id FOR UPDATE)
			UPDATE sendonce_batch s SET state = 'canceled', updated_at = now() FROM b WHERE s.id = b.id`

// CancelRunBatches cancels the frozen batches of run key not yet
// attempted. The error is the database's, unwrapped.
func CancelRunBatches(ctx context.Context, db DB, key string) error {
	_, err := db.Exec(ctx, outboxCancelRunBatchesSQL, key)
	return err
}

// outboxCancelRunMembersSQL cancels the members of run $1 whose send has
// not started: never attempted, or released by the split of a batch the
// API refused whole (its attempt counted, but first_attempt_at cleared:
// nothing of it can have been delivered), in no batch or in a canceled
// one.
const outboxCancelRunMembersSQL = `UPDATE sendonce_outbox o SET state = 'canceled', updated_at = now()
			WHERE o.run_key = $1 AND o.state = 'pending' AND (o.attempts = 0 OR o.first_attempt_at IS NULL)
				AND (o.batch_key IS NULL OR EXISTS (SELECT 1 FROM sendonce_batch b
					WHERE b.idempotency_key = o.batch_key AND b.state = 'canceled'))`

// CancelRunMembers cancels the members of run key whose send has not
// started (outboxCancelRunMembersSQL), and returns how many. The error is
// the database's, unwrapped.
func CancelRunMembers(ctx context.Context, db DB, key string) (int64, error) {
	tag, err := db.Exec(ctx, outboxCancelRunMembersSQL, key)
	return tag.RowsAffected(), err
}

// outboxNowSQL reads the database's clock, the one the drain compares
// send_at with.
const outboxNowSQL = `SELECT now()`

// RunClock reads the database's clock (now(): the transaction's start),
// the one the drain compares send_at with.
func RunClock(ctx context.Context, db DB) (time.Time, error) {
	var now time.Time
	err := db.QueryRow(ctx, outboxNowSQL).Scan(&now)
	return now, err
}

// outboxSetRunSendAtSQL moves run $1's send time to $2.
const outboxSetRunSendAtSQL = `UPDATE sendonce_run SET send_at = $2, updated_at = now() WHERE key = $1`

// SetRunSendAt moves the send time of run key to at. The error is the
// database's, unwrapped.
func SetRunSendAt(ctx context.Context, db DB, key string, at time.Time) error {
	_, err := db.Exec(ctx, outboxSetRunSendAtSQL, key, at)
	return err
}

// outboxUndoRunBatchesSQL undoes the frozen batches of run $1 not yet
// attempted, and frees their members.
const outboxUndoRunBatchesSQL = `WITH b AS (
				SELECT id, idempotency_key, member_keys FROM sendonce_batch
				WHERE run_key = $1 AND state = 'pending' AND attempts = 0 ORDER BY id FOR UPDATE),
			u AS (UPDATE sendonce_batch s SET state = 'canceled', last_error = 'undone by a reschedule of its run',
				updated_at = now() FROM b WHERE s.id = b.id)
			UPDATE sendonce_outbox o SET batch_key = NULL, updated_at = now()
			FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key
				AND o.state = 'pending' AND o.attempts = 0`

// UndoRunBatches undoes the frozen batches of run key not yet attempted
// (canceled, "undone by a reschedule of its run"), and frees their
// members from them. The error is the database's, unwrapped.
func UndoRunBatches(ctx context.Context, db DB, key string) error {
	_, err := db.Exec(ctx, outboxUndoRunBatchesSQL, key)
	return err
}

// outboxRescheduleRunSQL moves the members of run $1 whose send has not
// started to $2, in one statement, and gives every one to the drain
// (job_id NULL): a job held until the old time, its own or its undone
// batch's, no longer names the row, so it ends without sending.
const outboxRescheduleRunSQL = `UPDATE sendonce_outbox SET send_at = $2, job_id = NULL, next_attempt_at = NULL, updated_at = now()
			WHERE run_key = $1 AND state = 'pending' AND attempts = 0 AND batch_key IS NULL`

// RescheduleRunMembers moves the members of run key whose send has not
// started to at (outboxRescheduleRunSQL), and returns how many. The error
// is the database's, unwrapped.
func RescheduleRunMembers(ctx context.Context, db DB, key string, at time.Time) (int64, error) {
	tag, err := db.Exec(ctx, outboxRescheduleRunSQL, key, at)
	return tag.RowsAffected(), err
}
