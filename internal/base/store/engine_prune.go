package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention's statements (internal/engine/sendstate's Prune): each deletes
// up to a batch of one kind of row that retention lets go, in a
// transaction of the caller's, which takes the pruners' advisory lock
// first (TryPruneLock).

// sendingSQL says whether an intent is being sent now (through the partial
// index of unsettled rows).
const sendingSQL = `SELECT EXISTS (SELECT 1 FROM sendonce_outbox WHERE state = 'sending')`

// pruneIntentsSQL deletes up to $2 settled intents last updated before $1,
// their events, and leaves a tombstone for each, in one statement. An
// intent stays while:
//   - it is unsettled (pending, sending);
//   - its batch is unsettled (its outcome is still to be written);
//   - its run has an unsettled member (the run's counts are still read);
//   - its River job still may run (available, running, retryable,
//     scheduled, pending): a job runs against its intent's row, and a job
//     whose row is gone cancels itself without sending, but a row whose
//     job is still at work is left to it.
//
// Candidates are read in id order after $4 (where the last round of this
// prune stopped: rows a round passed over are not read again by the next)
// and below $3, the first id created at or after the cutoff, so a round
// never reads past the old end of the table. It returns the last id it
// deleted. Whether a run has an unsettled member is one probe of the
// partial index of unsettled members by run (migration 00022): it was a
// read of every pending member, for each candidate, while a large run was
// pending (10 rows/s during a 1M-member run).
//
// Each check is a probe per candidate (LIMIT 1 OFFSET 0 keeps PostgreSQL from
// turning a NOT EXISTS under OR into a hashed subplan: it hashed every
// unsettled member and every live River job of a 1M-member run, and when
// the hash would not fit work_mem, ran the subquery whole for each row:
// 33 rows/s). The state predicates are constants of the statement, so a
// generic plan keeps them.
const pruneIntentsSQL = `
	WITH doomed AS MATERIALIZED (
		SELECT o.id, o.idempotency_key, o.kind, o.template_id, o.payload, o.state
		FROM sendonce_outbox o
		WHERE o.id > $4 AND o.id < $3 AND o.state IN ('sent', 'failed', 'canceled', 'suppressed') AND o.updated_at < $1
			AND (o.batch_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_batch b
				WHERE b.idempotency_key = o.batch_key AND b.state IN ('pending', 'sending') LIMIT 1 OFFSET 0))
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_outbox m
				WHERE m.run_key = o.run_key AND m.run_key IS NOT NULL AND m.state IN ('pending', 'sending') LIMIT 1 OFFSET 0))
			AND (o.job_id IS NULL OR NOT EXISTS (SELECT 1 FROM river_job j
				WHERE j.id = o.job_id AND j.state IN ('available', 'running', 'retryable', 'scheduled', 'pending') LIMIT 1 OFFSET 0))
		ORDER BY o.id LIMIT $2
		FOR UPDATE OF o SKIP LOCKED
	), tomb AS (
		INSERT INTO sendonce_tombstone (key_hash, intent_hash, state)
		SELECT sendonce_key_hash(idempotency_key), sendonce_intent_hash(kind, template_id, payload), state FROM doomed
		ON CONFLICT (key_hash) DO UPDATE SET intent_hash = excluded.intent_hash, state = excluded.state, pruned_at = excluded.pruned_at
	), ev AS (
		DELETE FROM sendonce_event e WHERE e.intent_id IN (SELECT id FROM doomed) RETURNING 1
	), gone AS (
		DELETE FROM sendonce_outbox o USING doomed d WHERE o.id = d.id RETURNING 1
	)
	SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM ev), coalesce((SELECT max(id) FROM doomed), $4)`

// PruneBoundSQL is the first id created at or after the cutoff $1: the end
// of the ids pruneIntentsSQL reads (an id is drawn at insert, created_at
// is the inserting transaction's start, so the two agree but for rows of
// long transactions, which a later round takes). It is one past the last
// id when every row is older, 0 on an empty table.
//
// It bisects the ids, each step one probe of the primary key (the first
// row at or after the middle of what is left), so it reads a few dozen
// rows whatever the table's size. Every row below lo is old; the first
// row at or after hi is new, or there is none; when they meet, that row
// is the end. Read in id order until the first new row, it read every row
// older than the cutoff: 1.5-2 s with 3,000,000 rows of history, in one
// statement before the first transaction, beside the sends it otherwise
// gives way to (issue 26). The bisection relies on the same agreement of
// ids and creation times; a probe that meets an old row of a long
// transaction among new ones may move the end past it, and that row goes
// in this round rather than a later one.
const PruneBoundSQL = `WITH RECURSIVE top AS (SELECT max(id) AS id FROM sendonce_outbox),
	b(lo, hi) AS (
		SELECT 0::bigint, coalesce(top.id, 0) + 1 FROM top
	UNION ALL
		SELECT CASE WHEN p.created_at < $1 THEN p.id + 1 ELSE b.lo END,
			CASE WHEN p.id IS NULL THEN (b.lo + b.hi) / 2 WHEN p.created_at < $1 THEN b.hi ELSE p.id END
		FROM b LEFT JOIN LATERAL (SELECT o.id, o.created_at FROM sendonce_outbox o
			WHERE o.id >= (b.lo + b.hi) / 2 AND o.id < b.hi ORDER BY o.id LIMIT 1) p ON true
		WHERE b.lo < b.hi
	)
	SELECT coalesce(
		(SELECT o.id FROM sendonce_outbox o WHERE o.id >= (SELECT min(hi) FROM b) ORDER BY o.id LIMIT 1),
		(SELECT id + 1 FROM top), 0)`

// pruneBatchesSQL deletes settled batches last updated before $1 whose
// members are all gone.
const pruneBatchesSQL = `
	WITH doomed AS (
		SELECT b.id FROM sendonce_batch b
		WHERE b.state NOT IN ('pending', 'sending') AND b.updated_at < $1
			AND NOT EXISTS (SELECT 1 FROM sendonce_outbox o
				WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key)
			AND (b.job_id IS NULL OR NOT EXISTS (SELECT 1 FROM river_job j
				WHERE j.id = b.job_id AND j.state IN ('available', 'running', 'retryable', 'scheduled', 'pending')))
		ORDER BY b.id LIMIT $2
		FOR UPDATE OF b SKIP LOCKED
	)
	DELETE FROM sendonce_batch b USING doomed d WHERE b.id = d.id`

// pruneRunsSQL deletes runs last updated before $1 that are not paused and
// have no member left (so none unsettled: the run is done). A run a
// schedule created is not created again: the schedule has moved past its
// occurrence. Should a producer enqueue a pruned run's key again, its
// members' keys answer from their tombstones.
const pruneRunsSQL = `
	WITH doomed AS (
		SELECT r.key FROM sendonce_run r
		WHERE r.state <> 'paused' AND r.updated_at < $1
			AND NOT EXISTS (SELECT 1 FROM sendonce_outbox o WHERE o.run_key = r.key)
		ORDER BY r.key LIMIT $2
		FOR UPDATE OF r SKIP LOCKED
	)
	DELETE FROM sendonce_run r USING doomed d WHERE r.key = d.key`

// pruneEventsSQL deletes unmatched delivery events received before $1 (and
// over a day ago: the sweeper matches them for a day).
const pruneEventsSQL = `
	DELETE FROM sendonce_event WHERE event_id IN (
		SELECT event_id FROM sendonce_event
		WHERE intent_id IS NULL AND received_at < least($1, now() - interval '1 day')
		LIMIT $2 FOR UPDATE SKIP LOCKED)`

// pruneTombstonesSQL deletes tombstones made before $1.
const pruneTombstonesSQL = `
	DELETE FROM sendonce_tombstone WHERE key_hash IN (
		SELECT key_hash FROM sendonce_tombstone WHERE pruned_at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`

// pruneUnsubscribeEventsSQL deletes unsubscribe and resubscribe events
// recorded before $1, oldest first (ids grow with created_at).
const pruneUnsubscribeEventsSQL = `
	DELETE FROM sendonce_unsubscribe_event WHERE id IN (
		SELECT id FROM sendonce_unsubscribe_event WHERE created_at < $1
		ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`

// pruneCutoffSQL is PruneCutoff's statement.
const pruneCutoffSQL = `SELECT now() - $1::float8 * interval '1 second'`

// PruneCutoff reads the database's clock less ago: the cutoff of a
// retention.
func PruneCutoff(ctx context.Context, db PruneDB, ago time.Duration) (time.Time, error) {
	var cutoff time.Time
	err := db.QueryRow(ctx, pruneCutoffSQL, ago.Seconds()).Scan(&cutoff)
	return cutoff, err
}

// PruneDB is what PruneCutoff and PruneBound need of a database: a
// DB, or a pool or connection handed over to begin transactions with.
type PruneDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PruneBound is PruneBoundSQL's answer for cutoff.
func PruneBound(ctx context.Context, db PruneDB, cutoff time.Time) (int64, error) {
	var bound int64
	err := db.QueryRow(ctx, PruneBoundSQL, cutoff).Scan(&bound)
	return bound, err
}

// tryPruneLockSQL is TryPruneLock's statement.
const tryPruneLockSQL = `SELECT pg_try_advisory_xact_lock($1)`

// TryPruneLock takes, for the rest of the transaction, the pruners'
// advisory lock key, unless another transaction holds it
// (pg_try_advisory_xact_lock: it does not wait); it reports whether it
// took it.
func TryPruneLock(ctx context.Context, db DB, key int64) (bool, error) {
	var locked bool
	err := db.QueryRow(ctx, tryPruneLockSQL, key).Scan(&locked)
	return locked, err
}

// AnySending reports whether an intent is being sent now (sendingSQL).
func AnySending(ctx context.Context, db DB) (bool, error) {
	var sending bool
	err := db.QueryRow(ctx, sendingSQL).Scan(&sending)
	return sending, err
}

// pruneIntentsSettingsSQL is what PruneIntents sets for the rest of the
// transaction before pruneIntentsSQL.
const pruneIntentsSettingsSQL = `SET LOCAL enable_seqscan = off; SET LOCAL jit = off`

// PruneIntents runs pruneIntentsSQL in tx, which it must be: up to size
// intents with ids after after and below bound, settled and last updated
// before cutoff, deleted with their events, each leaving a tombstone. It
// returns how many intents and events it deleted, and the last id it
// deleted (after when none).
//
// The busy-run probe goes through its partial index: a run with no
// unsettled member looks, to the planner, like one whose members a few
// rows of a sequential scan would find, and it read the whole outbox for
// each candidate (86 ms a row). So the transaction plans without
// sequential scans (and without JIT).
func PruneIntents(ctx context.Context, tx DB, cutoff time.Time, size int, bound, after int64) (intents, events int, last int64, err error) {
	if _, err := tx.Exec(ctx, pruneIntentsSettingsSQL); err != nil {
		return 0, 0, after, err
	}
	if err := tx.QueryRow(ctx, pruneIntentsSQL, cutoff, size, bound, after).Scan(&intents, &events, &last); err != nil {
		return 0, 0, after, err
	}
	return intents, events, last, nil
}

// PruneBatches deletes up to size settled batches last updated before
// cutoff whose members are all gone (pruneBatchesSQL).
func PruneBatches(ctx context.Context, db DB, cutoff time.Time, size int) (int, error) {
	return pruneCount(ctx, db, pruneBatchesSQL, cutoff, size)
}

// PruneRuns deletes up to size done runs last updated before cutoff
// (pruneRunsSQL).
func PruneRuns(ctx context.Context, db DB, cutoff time.Time, size int) (int, error) {
	return pruneCount(ctx, db, pruneRunsSQL, cutoff, size)
}

// PruneEvents deletes up to size unmatched delivery events received
// before cutoff and over a day ago (pruneEventsSQL).
func PruneEvents(ctx context.Context, db DB, cutoff time.Time, size int) (int, error) {
	return pruneCount(ctx, db, pruneEventsSQL, cutoff, size)
}

// PruneTombstones deletes up to size tombstones made before cutoff
// (pruneTombstonesSQL).
func PruneTombstones(ctx context.Context, db DB, cutoff time.Time, size int) (int, error) {
	return pruneCount(ctx, db, pruneTombstonesSQL, cutoff, size)
}

// PruneUnsubscribeEvents deletes up to size unsubscribe and resubscribe
// events recorded before cutoff (pruneUnsubscribeEventsSQL).
func PruneUnsubscribeEvents(ctx context.Context, db DB, cutoff time.Time, size int) (int, error) {
	return pruneCount(ctx, db, pruneUnsubscribeEventsSQL, cutoff, size)
}

func pruneCount(ctx context.Context, db DB, sql string, cutoff time.Time, size int) (int, error) {
	tag, err := db.Exec(ctx, sql, cutoff, size)
	return int(tag.RowsAffected()), err
}
