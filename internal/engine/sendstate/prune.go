package sendstate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PruneOptions say what Prune deletes.
type PruneOptions struct {
	// Retain is how long a settled intent is kept after it settled (its
	// last update). Zero or more; zero prunes every settled intent that
	// may go.
	Retain time.Duration
	// RetainKeys is how long a pruned intent's tombstone, and an
	// unsubscribe event, is kept; zero keeps both for ever.
	RetainKeys time.Duration
	// BatchSize is how many rows one transaction deletes (default
	// DefaultPruneBatch).
	BatchSize int
	// Yield is how long Prune rests after a transaction while intents are
	// being sent, in multiples of that transaction's time (default
	// DefaultPruneYield; below zero, none).
	Yield float64
}

// DefaultPruneYield is PruneOptions.Yield when none is given: while an
// intent is being sent (a row in state sending), Prune rests nineteen times
// as long as each transaction took, so it takes at most a twentieth of the
// database time it would, the way autovacuum's cost delay keeps vacuum from
// starving the queries beside it. Retention is housekeeping and the sends
// are the work: on two cores, a prune at full speed (its own 30-50 µs of
// database CPU a row) cut a concurrent drain to 0.53-0.91x its rate before
// (issue 26); resting three times as long, to 0.54-0.62x beside 1,000,000
// rows of history; nine times, 0.74-0.93x; nineteen times, 0.84-1.05x
// (0.91x in a make bench, 0.95-1.02x in three runs alternated with three
// of nine). With nothing being sent it runs at full speed. A row left in
// sending by a worker that died keeps it paced until the row is rescued.
const DefaultPruneYield = 19.0

// sendingSQL says whether an intent is being sent now (through the partial
// index of unsettled rows).
const sendingSQL = `SELECT EXISTS (SELECT 1 FROM sendonce_outbox WHERE state = 'sending')`

// DefaultPruneBatch is how many rows one transaction of Prune deletes:
// small enough that its locks and its WAL are short, large enough that a
// backlog goes fast.
const DefaultPruneBatch = 1000

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Intents    int // intents deleted, each leaving a tombstone
	Events     int // their delivery events, and unmatched ones past retention
	Batches    int // settled batches with no member left
	Runs       int // done runs with no member left
	Tombstones int // tombstones past RetainKeys
	// UnsubscribeEvents counts the unsubscribe and resubscribe events past
	// RetainKeys: the history of who left a topic and when. Who is
	// unsubscribed now (sendonce_unsubscribe) is never pruned.
	UnsubscribeEvents int
	// Rested is how long Prune rested between its transactions for the
	// sends in flight (see DefaultPruneYield).
	Rested time.Duration
}

// PruneLockKey is the advisory lock each transaction of Prune takes with
// pg_try_advisory_xact_lock: one pruner at a time across the fleet (a
// second one finds it taken and leaves the round to the first).
const PruneLockKey int64 = 0x73656e6470727565 // "sendprue"

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
// Prune stopped: rows a round passed over are not read again by the next)
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

// pruneBoundSQL is the first id created at or after the cutoff $1: the end
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
const pruneBoundSQL = `WITH RECURSIVE top AS (SELECT max(id) AS id FROM sendonce_outbox),
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

// Prune deletes what retention lets go, in transactions of at most
// BatchSize rows each, until nothing more is due: settled intents (with
// their events) settled longer than Retain ago, leaving a tombstone each,
// then settled batches and done runs left without members, unmatched
// events, and tombstones and unsubscribe events older than RetainKeys.
// Cutoffs are measured on the database's clock. While intents are being
// sent it rests between transactions (PruneOptions.Yield). It returns
// early, with what it did, when ctx ends or another Prune holds
// PruneLockKey.
func Prune(ctx context.Context, db Beginner, opts PruneOptions) (PruneResult, error) {
	var res PruneResult
	if opts.Retain < 0 || opts.RetainKeys < 0 {
		return res, fmt.Errorf("sendstate: prune: retention must not be negative (retain %s, retain keys %s)", opts.Retain, opts.RetainKeys)
	}
	size := opts.BatchSize
	if size <= 0 {
		size = DefaultPruneBatch
	}
	yield := opts.Yield
	if yield == 0 {
		yield = DefaultPruneYield
	}
	var cutoff time.Time
	if err := db.QueryRow(ctx, `SELECT now() - $1::float8 * interval '1 second'`, opts.Retain.Seconds()).Scan(&cutoff); err != nil {
		return res, fmt.Errorf("sendstate: prune: read the clock: %w", err)
	}
	var bound int64
	if err := db.QueryRow(ctx, pruneBoundSQL, cutoff).Scan(&bound); err != nil {
		return res, fmt.Errorf("sendstate: prune: %w", err)
	}
	var after int64
	steps := []pruneStep{
		{"intents", &res.Intents, func(tx pgx.Tx) (int, error) {
			var n, ev int
			// The busy-run probe through its partial index: a run with no
			// unsettled member looks, to the planner, like one whose
			// members a few rows of a sequential scan would find, and it
			// read the whole outbox for each candidate (86 ms a row).
			if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL jit = off`); err != nil {
				return 0, err
			}
			err := tx.QueryRow(ctx, pruneIntentsSQL, cutoff, size, bound, after).Scan(&n, &ev, &after)
			res.Events += ev
			return n, err
		}},
		{"batches", &res.Batches, execCount(ctx, pruneBatchesSQL, cutoff, size)},
		{"runs", &res.Runs, execCount(ctx, pruneRunsSQL, cutoff, size)},
		{"events", &res.Events, execCount(ctx, pruneEventsSQL, cutoff, size)},
	}
	if opts.RetainKeys > 0 {
		var keysCutoff time.Time
		if err := db.QueryRow(ctx, `SELECT now() - $1::float8 * interval '1 second'`, opts.RetainKeys.Seconds()).Scan(&keysCutoff); err != nil {
			return res, fmt.Errorf("sendstate: prune: read the clock: %w", err)
		}
		steps = append(steps,
			pruneStep{"tombstones", &res.Tombstones, execCount(ctx, pruneTombstonesSQL, keysCutoff, size)},
			pruneStep{"unsubscribe events", &res.UnsubscribeEvents, execCount(ctx, pruneUnsubscribeEventsSQL, keysCutoff, size)})
	}
	for _, step := range steps {
		for {
			var n int
			locked, sending := true, false
			began := time.Now()
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, PruneLockKey).Scan(&locked); err != nil || !locked {
					return err
				}
				var err error
				if n, err = step.run(tx); err != nil || n < size || yield < 0 {
					return err
				}
				return tx.QueryRow(ctx, sendingSQL).Scan(&sending)
			})
			if err != nil {
				return res, fmt.Errorf("sendstate: prune %s: %w", step.what, err)
			}
			if !locked {
				return res, nil
			}
			*step.count += n
			if n < size {
				break
			}
			if sending {
				rest := time.Duration(yield * float64(time.Since(began)))
				select {
				case <-time.After(rest):
				case <-ctx.Done():
					return res, fmt.Errorf("sendstate: prune %s: %w", step.what, ctx.Err())
				}
				res.Rested += rest
			}
		}
	}
	return res, nil
}

// pruneStep is one kind of row Prune deletes: run deletes up to a batch
// of them in tx, and what they are counted in.
type pruneStep struct {
	what  string
	count *int
	run   func(tx pgx.Tx) (int, error)
}

// Beginner is a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func execCount(ctx context.Context, sql string, args ...any) func(tx pgx.Tx) (int, error) {
	return func(tx pgx.Tx) (int, error) {
		tag, err := tx.Exec(ctx, sql, args...)
		return int(tag.RowsAffected()), err
	}
}
