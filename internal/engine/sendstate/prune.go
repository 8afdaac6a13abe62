package sendstate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
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
	cutoff, err := store.PruneCutoff(ctx, db, opts.Retain)
	if err != nil {
		return res, fmt.Errorf("sendstate: prune: read the clock: %w", err)
	}
	// The end of the ids the intents' rounds read (store.PruneBoundSQL).
	bound, err := store.PruneBound(ctx, db, cutoff)
	if err != nil {
		return res, fmt.Errorf("sendstate: prune: %w", err)
	}
	var after int64
	steps := []pruneStep{
		{"intents", &res.Intents, func(tx pgx.Tx) (int, error) {
			// Rounds go on after the last id the last one deleted: rows a
			// round passed over are not read again by the next.
			n, ev, last, err := store.PruneIntents(ctx, tx, cutoff, size, bound, after)
			res.Events += ev
			after = last
			return n, err
		}},
		{"batches", &res.Batches, pruneCount(ctx, store.PruneBatches, cutoff, size)},
		{"runs", &res.Runs, pruneCount(ctx, store.PruneRuns, cutoff, size)},
		{"events", &res.Events, pruneCount(ctx, store.PruneEvents, cutoff, size)},
	}
	if opts.RetainKeys > 0 {
		keysCutoff, err := store.PruneCutoff(ctx, db, opts.RetainKeys)
		if err != nil {
			return res, fmt.Errorf("sendstate: prune: read the clock: %w", err)
		}
		steps = append(steps,
			pruneStep{"tombstones", &res.Tombstones, pruneCount(ctx, store.PruneTombstones, keysCutoff, size)},
			pruneStep{"unsubscribe events", &res.UnsubscribeEvents, pruneCount(ctx, store.PruneUnsubscribeEvents, keysCutoff, size)})
	}
	for _, step := range steps {
		for {
			var n int
			locked, sending := true, false
			began := time.Now()
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				var err error
				if locked, err = store.TryPruneLock(ctx, tx, PruneLockKey); err != nil || !locked {
					return err
				}
				if n, err = step.run(tx); err != nil || n < size || yield < 0 {
					return err
				}
				sending, err = store.AnySending(ctx, tx)
				return err
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

// pruneCount is a step of Prune that deletes with prune, one of store's
// Prune functions.
func pruneCount(ctx context.Context, prune func(context.Context, store.DB, time.Time, int) (int, error), cutoff time.Time, size int) func(tx pgx.Tx) (int, error) {
	return func(tx pgx.Tx) (int, error) {
		return prune(ctx, tx, cutoff, size)
	}
}
