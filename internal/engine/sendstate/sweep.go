package sendstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/store"
)

// NotifyChannel is the PostgreSQL channel on which the table's trigger
// announces rows inserted without a River job (by plain SQL).
const NotifyChannel = store.NotifyChannel

// Scheduler gives River jobs to intents that need one.
type Scheduler struct {
	Pool  *pgxpool.Pool
	River *river.Client[pgx.Tx]
	Queue string
	// ReconcileWindow is how many unsettled intents one statement of
	// Reconcile reads (default DefaultReconcileWindow).
	ReconcileWindow int
	// ReconcileBudget is how many unsettled intents one call of Reconcile
	// reads at most (default DefaultReconcileBudget); the next call goes on
	// where it stopped.
	ReconcileBudget int

	mu        sync.Mutex
	reconcile reconcileCursor
}

// reconcileCursor is where the next call of Reconcile starts: after the
// intent (state, after) in (state, id) order; the zero cursor is before
// every unsettled intent (the empty string sorts before every state).
type reconcileCursor struct {
	state string
	after int64
}

// DefaultReconcileBudget is how many unsettled intents one call of
// Reconcile reads: one window, some tens of milliseconds' work. With a
// larger backlog a pass over it takes several calls (a 1M backlog: 200
// calls, ten minutes at the sweeper's one call every 3 s), so that a call's
// cost is bounded whatever the backlog, and spread evenly over time: ten
// windows every 30 s, as it was, put 0.6 s of database work from a
// 1,000,000 backlog into one moment of a drain (issue 26).
const DefaultReconcileBudget = DefaultReconcileWindow

// DefaultReconcileWindow is how many unsettled intents one statement of
// Reconcile reads: a few milliseconds' work, so that no statement of it
// comes near a DBA's statement_timeout however large the backlog. Read in
// one statement, 300,000 unsettled intents took 225 ms on the test machine,
// and some millions would pass a 5 s statement_timeout.
const DefaultReconcileWindow = 5000

// sweepBatch bounds the rows one statement of a rescue or a reconcile
// gives jobs to.
const sweepBatch = 1000

// DefaultRestartGrace is how long after the database server started no
// lease is ended and nothing is rescued: heartbeats could not reach a
// server that was down, and live workers renew their leases as they
// reconnect.
const DefaultRestartGrace = 5 * time.Second

// RescueAbandoned gives a new River job to every intent left sending by a
// worker instance that is gone: the lease it was claimed under (claimed_by)
// is not held, ended by ExpireLeases after it lapsed (the worker crashed, or
// was paused or cut off past its lease) or released by a stopping worker,
// so the send was cut off. The intent stays
// sending (its next claim marks it uncertain) and its new job sends it again
// with the same key at once, instead of after River's rescuer takes the old
// job for stuck; its new job goes ahead of the queue. The old job, whenever it runs again, is no longer the
// intent's job and does nothing. Within restartGrace of the database
// server's start nothing is rescued (see DefaultRestartGrace). It returns
// how many it rescued.
func (o *Scheduler) RescueAbandoned(ctx context.Context, restartGrace time.Duration) (int, error) {
	return o.rescheduleAll(ctx, "rescue", sendjob.PriorityUrgent, func(tx pgx.Tx) ([]store.StrandedIntent, error) {
		return store.SelectAbandonedIntents(ctx, tx, sweepBatch, restartGrace)
	})
}

// RescueDrained is RescueAbandoned for drained intents (no River job of
// their own): every one left sending under a lease that is not held goes
// back to pending, due at once and marked uncertain (the cut-off attempt
// may have reached the API), its try given back (a crash is not the
// intent's try, as a River job's new job starts its attempts again), so that the next claim of any drain sends it
// again under the same key, and the API replays it if it was delivered.
// One statement; within restartGrace of the database server's start
// nothing is rescued. It returns how many it rescued.
func RescueDrained(ctx context.Context, db DB, restartGrace time.Duration) (int, error) {
	n, err := store.RescueDrained(ctx, db, restartGrace)
	if err != nil {
		return 0, fmt.Errorf("sendstate: rescue drained intents: %w", err)
	}
	if n > 0 {
		// The drains of every queue hear of them, not only the
		// sweeper's own.
		if err := WakeDrains(ctx, db); err != nil {
			return n, fmt.Errorf("sendstate: rescue drained intents: %w", err)
		}
	}
	return n, nil
}

// WakeDrains tells the drains of every queue, at commit, that intents may
// be due (the notification producers send): each looks again, and reads
// its queue's next due time.
func WakeDrains(ctx context.Context, db DB) error {
	if err := store.NotifyDrains(ctx, db); err != nil {
		return fmt.Errorf("sendstate: notify the drains: %w", err)
	}
	return nil
}

// ReleaseDrained gives a drained intent that its owner claimed, and whose
// attempt ended without a record (the database refused or was down when
// the outcome was to be written), back to pending, uncertain and due at
// once, its try given back, so that the next claim of any drain replays it
// under its key. It is RescueDrained for an owner whose lease is still
// held: a River job would run again after such an error, a drained intent
// has no job to do it. It changes nothing unless the row is still sending
// under owner's claim, so a release after a record that was made is a
// no-op. It reports whether it released the row.
func ReleaseDrained(ctx context.Context, db DB, key string, owner int32) (bool, error) {
	released, err := store.ReleaseDrained(ctx, db, key, owner)
	if err != nil {
		return false, fmt.Errorf("sendstate: release drained intent %q: %w", key, err)
	}
	return released, nil
}

// UnclaimDrained gives back the drained intents of keys that owner claimed
// and never attempted (claimed ahead for a send that did not come to
// take them: see the worker's drain), as they were before the claim:
// pending and due at once, the claim's attempt and try not counted, no
// more uncertain than they were, and what the claim spent of their
// tenants' rates and quotas given back; a member of a run canceled meanwhile
// is canceled (the run's cancel left it, claimed, to its send). An intent
// no longer sending under owner's claim is left as it is. It returns how
// many it gave back.
func UnclaimDrained(ctx context.Context, db DB, keys []string, owner int32) (int, error) {
	var n int
	err := captureStatus(ctx, db, func(db DB) error {
		var err error
		n, err = store.UnclaimDrained(ctx, db, keys, owner)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sendstate: give back %d unsent claims: %w", len(keys), err)
	}
	return n, nil
}

// ReleaseOrphans gives back to pending, uncertain and due at once, its try
// given back, every drained intent left sending under owner's claim that
// owner no longer has in flight (flying: the keys of its claims whose
// attempt has not ended) and that was claimed more than minAge ago. Such
// an intent is a claim whose answer the worker never read: the database
// committed it, and the connection was lost (a crash or restart of the
// database) before the rows, or the commit's answer, came back. No attempt
// of it can have started, but none can be ruled out either, so it is sent
// again under its key, which the API replays. RescueDrained does the same
// for an owner whose lease has ended; this is for the owner while it
// lives, which alone knows what it has in flight. minAge covers a claim
// committed and not yet handed to a send. It returns how many it released.
func ReleaseOrphans(ctx context.Context, db DB, owner int32, flying []string, minAge time.Duration) (int, error) {
	n, err := store.ReleaseOrphans(ctx, db, owner, flying, minAge)
	if err != nil {
		return 0, fmt.Errorf("sendstate: release orphaned claims: %w", err)
	}
	return n, nil
}

// RescueStranded gives a new River job to every pending intent whose job a
// worker instance that is gone was running: the job had not claimed its
// intent yet (it was waiting for the fleet's budget, backing off, or
// gathering a batch) when the worker died, so no claim names the dead
// lease and RescueAbandoned cannot see it, and River's rescuer would take
// the job for stuck only after RescueAfter. It reads River's running jobs
// (as many as the fleet has slots) and the River client that ran each last
// (attempted_by), whose worker's lease has ended. The old job, whenever it
// runs again, is no longer the intent's job and does nothing. It returns
// how many it rescued.
func (o *Scheduler) RescueStranded(ctx context.Context, restartGrace time.Duration) (int, error) {
	return o.rescheduleAll(ctx, "rescue stranded", sendjob.PriorityUrgent, func(tx pgx.Tx) ([]store.StrandedIntent, error) {
		return store.SelectStrandedIntents(ctx, tx, sweepBatch, restartGrace)
	})
}

// Reconcile gives a new River job to every intent still to be sent
// (pending or sending) whose job is gone or finished without it: deleted
// or cancelled in the River UI, discarded after its attempts ran out, or
// discarded by a River client that does not know sendonce's job kind. It
// returns how many it rescheduled.
//
// It reads the unsettled intents in pieces, in (state, id) order,
// ReconcileWindow at a time, so no statement's work grows with the
// backlog, and at most ReconcileBudget of them a call: a call goes on where
// the last one stopped, and a pass over the backlog starts again from the
// first once it reached the end. A window whose statement passes the
// server's statement_timeout is read again in halves (down to
// minReconcileWindow) for the rest of the call. The window is a row
// comparison on (state, id), the partial index of unsettled intents' key
// (TestStatePlansSurviveStaleStatistics).
// See store.ReconcileWindow for how each window's jobs are checked.
func (o *Scheduler) Reconcile(ctx context.Context) (int, error) {
	window := o.ReconcileWindow
	if window <= 0 {
		window = DefaultReconcileWindow
	}
	budget := o.ReconcileBudget
	if budget <= 0 {
		budget = DefaultReconcileBudget
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	total, read := 0, 0
	for cur := &o.reconcile; read < budget; {
		size := min(window, budget-read)
		n, seen, last, err := o.reconcileWindow(ctx, *cur, size)
		total += n
		if timedOut(ctx, err) && window > minReconcileWindow {
			// A statement_timeout shorter than a window's work (a
			// loaded server, a strict DBA): the same intents again in
			// smaller windows, for the rest of this call.
			window = max(window/2, minReconcileWindow)
			continue
		}
		if err != nil {
			return total, err
		}
		read += seen
		if seen > 0 {
			*cur = last
		}
		if seen < size {
			// The backlog is read to the end: the next pass starts again.
			*cur = reconcileCursor{}
			return total, nil
		}
	}
	return total, nil
}

// Reconciling reports whether a pass of Reconcile over the unsent intents
// is under way: the last call stopped before the end of them.
func (o *Scheduler) Reconciling() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reconcile != (reconcileCursor{})
}

// minReconcileWindow is the smallest window Reconcile shrinks to when its
// statements pass the server's statement_timeout.
const minReconcileWindow = 50

// reconcileWindow reads up to size unsettled intents after cur and gives a
// new job to those whose job is gone or finished without them. It returns
// how many it rescheduled, how many it read and the last one read.
func (o *Scheduler) reconcileWindow(ctx context.Context, cur reconcileCursor, size int) (n, seen int, last reconcileCursor, err error) {
	var suspects []int64
	err = store.ReconcileWindow(ctx, o.Pool, cur.state, cur.after, size, func(state string, id int64, suspect bool) {
		seen++
		if state > last.state || state == last.state && id > last.after {
			last = reconcileCursor{state, id}
		}
		if suspect {
			suspects = append(suspects, id)
		}
	})
	if err != nil {
		return 0, 0, last, fmt.Errorf("sendstate: reconcile: %w", err)
	}
	if len(suspects) == 0 {
		return 0, seen, last, nil
	}
	n, err = o.rescheduleAll(ctx, "reconcile", sendjob.PriorityNormal, func(tx pgx.Tx) ([]store.StrandedIntent, error) {
		return store.SelectReconcileIntents(ctx, tx, sweepBatch, suspects)
	})
	return n, seen, last, err
}

// timedOut reports whether err is the server cancelling a statement that
// passed its statement_timeout (not ctx's cancellation, which the server
// reports with the same code).
func timedOut(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	return ctx.Err() == nil && errors.As(err, &pgErr) && pgErr.Code == "57014" // query_canceled
}

// RescueAbandonedBatches is RescueAbandoned for coalesced batches: a
// batch left sending by a worker instance that is gone gets a new batch job
// at once, which sends the same body under the same key.
func (o *Scheduler) RescueAbandonedBatches(ctx context.Context, restartGrace time.Duration) (int, error) {
	return o.rescheduleBatches(ctx, "rescue batches", sendjob.PriorityUrgent, func(tx pgx.Tx) ([]store.StrandedBatch, error) {
		return store.SelectAbandonedBatches(ctx, tx, sweepBatch, restartGrace)
	})
}

// RescueStrandedBatches is RescueStranded for coalesced batches: a pending
// batch whose job a worker instance that is gone was running (River had
// fetched the job, which had not claimed the batch yet: it waited for the
// fleet's budget, or was backing off, when the worker died) gets a new
// batch job at once, with its members, which sends the same body under the
// same key. No claim names the dead lease, so RescueAbandonedBatches cannot
// see it, and without this the batch and its members waited for River's
// rescuer (RescueAfter) while a lone intent beside them was rescued in
// seconds (issue 44). The old job, whenever it runs again, is no longer the
// batch's job and claims nothing (ClaimBatch matches the job). It returns
// how many batches it rescued.
func (o *Scheduler) RescueStrandedBatches(ctx context.Context, restartGrace time.Duration) (int, error) {
	return o.rescheduleBatches(ctx, "rescue stranded batches", sendjob.PriorityUrgent, func(tx pgx.Tx) ([]store.StrandedBatch, error) {
		return store.SelectStrandedBatches(ctx, tx, sweepBatch, restartGrace)
	})
}

// ReconcileBatches is Reconcile for coalesced batches: an unsettled batch
// whose job is gone or finished without it gets a new batch job. Its
// members are never given jobs of their own: a frozen batch's members go
// out in it, under its key, or not at all.
func (o *Scheduler) ReconcileBatches(ctx context.Context) (int, error) {
	return o.rescheduleBatches(ctx, "reconcile batches", sendjob.PriorityNormal, func(tx pgx.Tx) ([]store.StrandedBatch, error) {
		return store.SelectReconcileBatches(ctx, tx, sweepBatch)
	})
}

// rescheduleBatches gives a new batch job, in one transaction, to each of
// the batches (at most sweepBatch) that selectBatches locks, and names it
// on the batch and its unsettled members. The owner is forgotten with the
// old job, as reschedule forgets it.
func (o *Scheduler) rescheduleBatches(ctx context.Context, op string, priority int, selectBatches func(pgx.Tx) ([]store.StrandedBatch, error)) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error {
		batches, err := selectBatches(tx)
		if err != nil || len(batches) == 0 {
			return err
		}
		ids := make([]int64, len(batches))
		params := make([]river.InsertManyParams, len(batches))
		for i, b := range batches {
			ids[i] = b.ID
			params[i] = river.InsertManyParams{Args: sendjob.BatchArgs{Key: b.Key, RunKey: b.RunKey},
				InsertOpts: sendjob.InsertOpts(b.Queue, time.Time{}, runPriority(priority, b.RunKey))}
		}
		jobIDs, err := o.insertJobs(ctx, tx, params)
		if err != nil {
			return err
		}
		if err := store.SetBatchJobs(ctx, tx, ids, jobIDs); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sendstate: %s: %w", op, err)
	}
	return n, nil
}

// runPriority is priority, or for a normal one, the priority of a new job
// for an intent of run (bulk for a run's members).
func runPriority(priority int, run string) int {
	if priority == sendjob.PriorityNormal {
		return sendjob.PriorityFor(run)
	}
	return priority
}

// rescheduleAll is reschedule until a round gives fewer than sweepBatch
// intents jobs.
func (o *Scheduler) rescheduleAll(ctx context.Context, op string, priority int, selectIntents func(pgx.Tx) ([]store.StrandedIntent, error)) (int, error) {
	total := 0
	for {
		n, err := o.reschedule(ctx, op, priority, selectIntents)
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// reschedule gives a new River job, in one transaction, to each of the
// intents (at most sweepBatch) that selectIntents locks, and names it on
// the intent. The owner is forgotten with the old job: the intent is
// rescued once, and its new job's claim names the next owner.
func (o *Scheduler) reschedule(ctx context.Context, op string, priority int, selectIntents func(pgx.Tx) ([]store.StrandedIntent, error)) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error {
		intents, err := selectIntents(tx)
		if err != nil || len(intents) == 0 {
			return err
		}
		ids := make([]int64, len(intents))
		params := make([]river.InsertManyParams, len(intents))
		for i, in := range intents {
			var at time.Time
			if in.SendAt != nil {
				at = *in.SendAt
			}
			ids[i] = in.ID
			params[i] = river.InsertManyParams{Args: sendjob.Args{Key: in.Key, IntentKind: in.Kind, RunKey: in.RunKey},
				InsertOpts: sendjob.InsertOpts(o.Queue, at, runPriority(priority, in.RunKey))}
		}
		jobIDs, err := o.insertJobs(ctx, tx, params)
		if err != nil {
			return err
		}
		if err := store.SetIntentJobs(ctx, tx, ids, jobIDs); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sendstate: %s: %w", op, err)
	}
	return n, nil
}

// insertJobs inserts the River jobs params in tx and returns their ids, in
// order.
func (o *Scheduler) insertJobs(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]int64, error) {
	jobs, err := o.River.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert river jobs: %w", err)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.Job.ID
	}
	return ids, nil
}
