package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/sendjob"
)

// The sweeps of the worker's engine (internal/engine/sendstate): the
// rescues of intents and batches a worker that is gone left behind, the
// reconcile of those whose River job is gone, and the drains' wake-up.
// The Select functions lock the rows they return (FOR UPDATE SKIP LOCKED):
// the caller gives them new River jobs in the same transaction and names
// the jobs with SetIntentJobs or SetBatchJobs.

// NotifyChannel is the PostgreSQL channel on which the drains and the
// fleet's sweeper listen: the table's trigger announces rows inserted
// without a River job (by plain SQL), NotifyDrains wakes the drains, and
// TakeLease and ReleaseLease tell the sweeper of a lease (LeaseNotice).
const NotifyChannel = "sendonce_outbox"

// notifyDrainsSQL is NotifyDrains's statement.
const notifyDrainsSQL = `SELECT pg_notify($1, '')`

// NotifyDrains tells the drains of every queue, at commit, that intents
// may be due (the notification producers send).
func NotifyDrains(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, notifyDrainsSQL, NotifyChannel)
	return err
}

// rescueDrainedSQL is RescueDrained's statement.
var rescueDrainedSQL = `UPDATE sendonce_outbox o
		SET state = 'pending', uncertain = true, claimed_by = NULL, next_attempt_at = NULL,
			tries = greatest(tries - 1, 0), updated_at = now()
		WHERE o.state = 'sending' AND o.job_id IS NULL AND o.claimed_by IS NOT NULL AND o.batch_key IS NULL
			AND now() - pg_postmaster_start_time() > $1::float8 * interval '1 second'
			AND NOT ` + held("o.claimed_by")

// RescueDrained puts every drained intent (no River job, no batch) left
// sending under a lease that is not held back to pending, uncertain, due
// at once and its try given back, unless the database server started
// within restartGrace. It returns how many it rescued.
func RescueDrained(ctx context.Context, db DB, restartGrace time.Duration) (int, error) {
	tag, err := db.Exec(ctx, rescueDrainedSQL, restartGrace.Seconds())
	return int(tag.RowsAffected()), err
}

// releaseDrainedSQL is ReleaseDrained's statement.
const releaseDrainedSQL = `UPDATE sendonce_outbox o
		SET state = 'pending', uncertain = true, claimed_by = NULL, next_attempt_at = NULL,
			tries = greatest(tries - 1, 0), updated_at = now()
		WHERE o.idempotency_key = $1 AND o.state = 'sending' AND o.job_id IS NULL AND o.batch_key IS NULL
			AND o.claimed_by = $2`

// ReleaseDrained is RescueDrained for the drained intent of key while it
// is sending under owner's claim. It reports whether it released it.
func ReleaseDrained(ctx context.Context, db DB, key string, owner int32) (bool, error) {
	tag, err := db.Exec(ctx, releaseDrainedSQL, key, owner)
	return tag.RowsAffected() > 0, err
}

// unclaimDrainedSQL is UnclaimDrained's statement. The runs of the
// intents are locked first (FOR SHARE, in key order), as a run's cancel
// locks its run (FOR UPDATE) before its members: a cancel committed while
// the statement waited is read (a locked row is read as last committed),
// and a cancel that comes after waits for the give-back and then finds
// the member pending. Without the lock, a give-back and a cancel at the
// same moment each read the other's rows as they were before: the cancel
// left the member (it was sending), the give-back made it pending (the run
// was not canceled yet), and the next claim sent it (TestSystem, rule 3,
// seed 1632). What the claim
// spent of the tenant's limits (claimSharesSQL) is given back with the
// intents: a token of its rate for each, and for each first claim (one
// attempt) a count of the quotas, if it was counted in the period its
// row counts now (the claim set first_attempt_at and day_start from the
// same now()), and after the tenant's settings last changed (updated_at:
// a claim made before the tenant had a limit was not counted, and giving
// it back would let one more through). Without that, an intent claimed
// ahead and given back counted twice against its tenant's quotas once
// claimed again. The
// tenants' rows are locked in name order, as a claim locks them.
const unclaimDrainedSQL = `WITH was AS (
			SELECT o.id, o.attempts, o.first_attempt_at, o.run_key FROM sendonce_outbox o
			WHERE o.idempotency_key = ANY($1::text[]) AND o.state = 'sending' AND o.job_id IS NULL AND o.batch_key IS NULL
				AND o.claimed_by = $2),
		runs AS MATERIALIZED (
			SELECT run.key, run.state FROM sendonce_run run
			WHERE run.key IN (SELECT was.run_key FROM was WHERE was.run_key IS NOT NULL)
			ORDER BY run.key FOR SHARE OF run),
		given AS (
			UPDATE sendonce_outbox o
			SET state = CASE WHEN o.run_key IS NOT NULL AND (o.attempts <= 1 OR o.first_attempt_at IS NULL)
					AND EXISTS (SELECT 1 FROM runs WHERE runs.key = o.run_key AND runs.state = 'canceled')
					THEN 'canceled' ELSE 'pending' END,
				claimed_by = NULL, next_attempt_at = NULL,
				attempts = greatest(o.attempts - 1, 0), tries = greatest(o.tries - 1, 0),
				first_attempt_at = CASE WHEN o.attempts <= 1 THEN NULL ELSE o.first_attempt_at END,
				updated_at = now()
			FROM was
			WHERE o.id = was.id AND o.state = 'sending' AND o.job_id IS NULL AND o.batch_key IS NULL AND o.claimed_by = $2
			RETURNING ` + tenantSQL + ` AS tenant, was.attempts = 1 AS first, was.first_attempt_at),
		locked AS (
			SELECT t.name, t.day_start, t.month_start, t.updated_at FROM sendonce_tenant t
			WHERE t.name IN (SELECT tenant FROM given) AND ` + limitedSQL + `
			ORDER BY t.name FOR UPDATE OF t),
		back AS (
			UPDATE sendonce_tenant t
			SET tokens = CASE WHEN t.rate IS NULL OR t.refilled_at IS NULL THEN t.tokens
					ELSE least(greatest(t.rate, 1), t.tokens + c.n) END,
				day_count = greatest(t.day_count - c.day, 0), month_count = greatest(t.month_count - c.month, 0)
			FROM (SELECT l.name, count(*) AS n,
					count(*) FILTER (WHERE g.first AND g.first_attempt_at >= greatest(l.day_start, l.updated_at)) AS day,
					count(*) FILTER (WHERE g.first AND g.first_attempt_at >= greatest(l.month_start, l.updated_at)) AS month
				FROM locked l JOIN given g ON g.tenant = l.name GROUP BY l.name) c
			WHERE t.name = c.name)
		SELECT count(*) FROM given`

// UnclaimDrained gives the drained intents of keys that are sending under
// owner's claim back to pending as they were before the claim: its
// attempt and try not counted, due at once, uncertain as it was (no
// request of the claim was made), and what the claim spent of its
// tenant's rate and quotas given back. A member of a run canceled
// meanwhile is canceled, as the run's cancel would have canceled it had
// it not been claimed: when no attempt before this claim may have reached
// the API (outboxCancelRunMembersSQL's condition, as it will be); one
// attempted before goes back to pending, to be sent again under its key.
// It returns how many it gave back.
func UnclaimDrained(ctx context.Context, db DB, keys []string, owner int32) (int, error) {
	var n int
	err := db.QueryRow(ctx, unclaimDrainedSQL, keys, owner).Scan(&n)
	return n, err
}

// releaseOrphansSQL is ReleaseOrphans's statement.
const releaseOrphansSQL = `UPDATE sendonce_outbox o
		SET state = 'pending', uncertain = true, claimed_by = NULL, next_attempt_at = NULL,
			tries = greatest(tries - 1, 0), updated_at = now()
		WHERE o.state = 'sending' AND o.job_id IS NULL AND o.batch_key IS NULL AND o.claimed_by = $1
			AND o.updated_at < now() - $3::float8 * interval '1 second'
			AND o.idempotency_key <> ALL($2::text[])`

// ReleaseOrphans is RescueDrained for the drained intents sending under
// owner's claim, last updated more than minAge ago, whose keys are not in
// flying (nil: none). It returns how many it released.
func ReleaseOrphans(ctx context.Context, db DB, owner int32, flying []string, minAge time.Duration) (int, error) {
	if flying == nil {
		flying = []string{} // <> ALL(NULL) would release nothing
	}
	tag, err := db.Exec(ctx, releaseOrphansSQL, owner, flying, minAge.Seconds())
	return int(tag.RowsAffected()), err
}

// StrandedIntent is an intent a sweep gives a new River job: its row, key,
// kind, send_at and run ("": none).
type StrandedIntent struct {
	ID     int64
	Key    string
	Kind   string
	SendAt *time.Time
	RunKey string
}

func selectStrandedIntents(ctx context.Context, db DB, sql string, args ...any) ([]StrandedIntent, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StrandedIntent
	for rows.Next() {
		var s StrandedIntent
		if err := rows.Scan(&s.ID, &s.Key, &s.Kind, &s.SendAt, &s.RunKey); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// abandonedIntentsSQL is SelectAbandonedIntents' statement.
var abandonedIntentsSQL = `SELECT o.id, o.idempotency_key, o.kind, o.send_at, coalesce(o.run_key, '') FROM sendonce_outbox o
		WHERE o.state = 'sending' AND o.claimed_by IS NOT NULL AND o.batch_key IS NULL AND o.job_id IS NOT NULL
			AND now() - pg_postmaster_start_time() > $2::float8 * interval '1 second'
			AND NOT ` + held("o.claimed_by") + `
		ORDER BY o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`

// SelectAbandonedIntents locks up to limit intents with a River job of
// their own, in no batch, left sending under a lease that is not held,
// unless the database server started within restartGrace.
func SelectAbandonedIntents(ctx context.Context, db DB, limit int, restartGrace time.Duration) ([]StrandedIntent, error) {
	return selectStrandedIntents(ctx, db, abandonedIntentsSQL, limit, restartGrace.Seconds())
}

// strandedIntentsSQL is SelectStrandedIntents' statement.
var strandedIntentsSQL = `SELECT o.id, o.idempotency_key, o.kind, o.send_at, coalesce(o.run_key, '') FROM river_job j
		JOIN sendonce_outbox o ON o.idempotency_key = j.args->>'key' AND o.job_id = j.id
		WHERE j.state = 'running' AND j.kind = '` + (sendjob.Args{}).Kind() + `'
			AND o.state = 'pending' AND o.batch_key IS NULL
			AND now() - pg_postmaster_start_time() > $2::float8 * interval '1 second'
			AND EXISTS (SELECT 1 FROM sendonce_worker w
				WHERE w.river_client_id = j.attempted_by[array_upper(j.attempted_by, 1)] AND w.ended_at IS NOT NULL)
		ORDER BY o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`

// SelectStrandedIntents locks up to limit pending intents in no batch
// whose River job (a send job) is running on a River client whose worker's
// lease has ended, unless the database server started within
// restartGrace.
func SelectStrandedIntents(ctx context.Context, db DB, limit int, restartGrace time.Duration) ([]StrandedIntent, error) {
	return selectStrandedIntents(ctx, db, strandedIntentsSQL, limit, restartGrace.Seconds())
}

// jobEndedSQL says, of the job j found for an intent (by a LEFT JOIN),
// that it is gone or finished: the reconcile's rule, in the window that
// finds suspects (ReconcileWindow) and again under lock
// (SelectReconcileIntents).
const jobEndedSQL = `(j.state IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))`

// reconcileWindowSQL reads a window of unsettled intents with a River job
// of their own (the only ones the reconcile acts on; sendonce_outbox_jobbed_idx
// holds them) after ($1, $2) in (state, id) order, at most $3, each with whether its job is gone or
// finished without it: one pass through the window's index entries and a
// lookup of each job by its id (LIMIT 1 in a LATERAL keeps the planner from
// hashing all of river_job for every window: 49 ms a window against 300,000
// jobs, where the lookups take a few). It locks nothing; the suspects are
// checked again under lock. The window and the check used to be two
// statements, the second finding the window's rows again by id: 21 ms and
// 50 ms a window of 5,000 in the drain from a backlog of 1,000,000 (issue
// 26), against 26–30 ms for this one, measured quiet.
//
// The window is a row comparison on (state, id), the partial index of
// unsettled intents' key: with one state a constant of the statement,
// statistics taken while a run was pending made the planner walk the
// primary key over every sent row of history to find the pending ones
// (TestStatePlansSurviveStaleStatistics).
const reconcileWindowSQL = `WITH w AS MATERIALIZED (
		SELECT state, id, job_id FROM sendonce_outbox
		WHERE state IN ('pending', 'sending') AND job_id IS NOT NULL AND batch_key IS NULL
			AND (state, id) > ($1, $2) ORDER BY state, id LIMIT $3)
	SELECT w.state, w.id, w.job_id IS NOT NULL AND ` + jobEndedSQL + `
	FROM w LEFT JOIN LATERAL (SELECT j.state FROM river_job j WHERE j.id = w.job_id LIMIT 1) j ON true`

// ReconcileWindow reads up to size unsettled intents with a River job of
// their own after (afterState, afterID) in (state, id) order, and calls fn
// with each one's state and id and whether its job is gone or finished
// (a suspect, to check again under lock with SelectReconcileIntents). It
// locks nothing.
func ReconcileWindow(ctx context.Context, db DB, afterState string, afterID int64, size int, fn func(state string, id int64, suspect bool)) error {
	rows, err := db.Query(ctx, reconcileWindowSQL, afterState, afterID, size)
	if err != nil {
		return err
	}
	var state string
	var id int64
	var suspect bool
	_, err = pgx.ForEachRow(rows, []any{&state, &id, &suspect}, func() error {
		fn(state, id, suspect)
		return nil
	})
	return err
}

// reconcileIntentsSQL is SelectReconcileIntents' statement.
const reconcileIntentsSQL = `SELECT o.id, o.idempotency_key, o.kind, o.send_at, coalesce(o.run_key, '') FROM sendonce_outbox o
		LEFT JOIN LATERAL (SELECT j.state FROM river_job j WHERE j.id = o.job_id LIMIT 1) j ON true
		WHERE o.id = ANY($2) AND o.state IN ('pending', 'sending') AND o.job_id IS NOT NULL AND o.batch_key IS NULL
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run r WHERE r.key = o.run_key AND r.state = 'paused'))
			AND ` + jobEndedSQL + `
		ORDER BY o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`

// SelectReconcileIntents locks up to limit of the intents ids that are
// still unsettled, in no batch and of no paused run, and whose River job
// is gone or finished.
func SelectReconcileIntents(ctx context.Context, db DB, limit int, ids []int64) ([]StrandedIntent, error) {
	return selectStrandedIntents(ctx, db, reconcileIntentsSQL, limit, ids)
}

// setIntentJobsSQL is SetIntentJobs's statement.
const setIntentJobsSQL = `UPDATE sendonce_outbox o SET job_id = u.job_id, claimed_by = NULL, updated_at = now()
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id) WHERE o.id = u.id`

// SetIntentJobs names the new River job jobIDs[i] on the intent ids[i],
// and forgets its owner: the intent is rescued once, and its new job's
// claim names the next owner.
func SetIntentJobs(ctx context.Context, db DB, ids, jobIDs []int64) error {
	_, err := db.Exec(ctx, setIntentJobsSQL, ids, jobIDs)
	return err
}

// StrandedBatch is a batch a sweep gives a new River job: its row, key,
// queue and run ("": none).
type StrandedBatch struct {
	ID     int64
	Key    string
	Queue  string
	RunKey string
}

func selectStrandedBatches(ctx context.Context, db DB, sql string, args ...any) ([]StrandedBatch, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StrandedBatch
	for rows.Next() {
		var s StrandedBatch
		if err := rows.Scan(&s.ID, &s.Key, &s.Queue, &s.RunKey); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// abandonedBatchesSQL is SelectAbandonedBatches' statement.
var abandonedBatchesSQL = `SELECT b.id, b.idempotency_key, b.queue, coalesce(b.run_key, '') FROM sendonce_batch b
		WHERE b.state = 'sending' AND b.claimed_by IS NOT NULL
			AND now() - pg_postmaster_start_time() > $2::float8 * interval '1 second'
			AND NOT ` + held("b.claimed_by") + `
		ORDER BY b.id LIMIT $1 FOR UPDATE OF b SKIP LOCKED`

// SelectAbandonedBatches locks up to limit batches left sending under a
// lease that is not held, unless the database server started within
// restartGrace.
func SelectAbandonedBatches(ctx context.Context, db DB, limit int, restartGrace time.Duration) ([]StrandedBatch, error) {
	return selectStrandedBatches(ctx, db, abandonedBatchesSQL, limit, restartGrace.Seconds())
}

// strandedBatchesSQL is SelectStrandedBatches' statement.
var strandedBatchesSQL = `SELECT b.id, b.idempotency_key, b.queue, coalesce(b.run_key, '') FROM river_job j
		JOIN sendonce_batch b ON b.idempotency_key = j.args->>'key' AND b.job_id = j.id
		WHERE j.state = 'running' AND j.kind = '` + (sendjob.BatchArgs{}).Kind() + `'
			AND b.state = 'pending'
			AND now() - pg_postmaster_start_time() > $2::float8 * interval '1 second'
			AND EXISTS (SELECT 1 FROM sendonce_worker w
				WHERE w.river_client_id = j.attempted_by[array_upper(j.attempted_by, 1)] AND w.ended_at IS NOT NULL)
		ORDER BY b.id LIMIT $1 FOR UPDATE OF b SKIP LOCKED`

// SelectStrandedBatches locks up to limit pending batches whose River job
// (a batch job) is running on a River client whose worker's lease has
// ended, unless the database server started within restartGrace.
func SelectStrandedBatches(ctx context.Context, db DB, limit int, restartGrace time.Duration) ([]StrandedBatch, error) {
	return selectStrandedBatches(ctx, db, strandedBatchesSQL, limit, restartGrace.Seconds())
}

// reconcileBatchesSQL is SelectReconcileBatches's statement.
const reconcileBatchesSQL = `SELECT b.id, b.idempotency_key, b.queue, coalesce(b.run_key, '') FROM sendonce_batch b
		LEFT JOIN river_job j ON j.id = b.job_id
		WHERE b.state IN ('pending', 'sending')
			AND (b.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run r WHERE r.key = b.run_key AND r.state = 'paused'))
			AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
		ORDER BY b.id LIMIT $1 FOR UPDATE OF b SKIP LOCKED`

// SelectReconcileBatches locks up to limit unsettled batches, of no paused
// run, whose River job is gone or finished.
func SelectReconcileBatches(ctx context.Context, db DB, limit int) ([]StrandedBatch, error) {
	return selectStrandedBatches(ctx, db, reconcileBatchesSQL, limit)
}

// setBatchJobsSQL is SetBatchJobs's statement.
const setBatchJobsSQL = `WITH b AS (
				UPDATE sendonce_batch b SET job_id = u.job_id, claimed_by = NULL, updated_at = now()
				FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id) WHERE b.id = u.id
				RETURNING b.idempotency_key, b.member_keys, b.job_id)
			UPDATE sendonce_outbox o SET job_id = b.job_id, claimed_by = NULL, updated_at = now()
			FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key
				AND o.state IN ('pending', 'sending')`

// SetBatchJobs names the new River job jobIDs[i] on the batch ids[i] and
// on its unsettled members, and forgets their owner.
func SetBatchJobs(ctx context.Context, db DB, ids, jobIDs []int64) error {
	_, err := db.Exec(ctx, setBatchJobsSQL, ids, jobIDs)
	return err
}
