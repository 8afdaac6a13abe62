package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// sweeper wakes the worker's drain. It listens on the channel producers
// notify when they write an intent due now (EnqueueMany's statement, the
// plain-SQL producers' trigger), so a new intent is claimed at once by the
// drains that hear of it, and it wakes the drain every interval too, so a
// retry come due, or a missed notification (a dropped connection, a
// restarted database), is claimed within an interval. Every interval it
// also gives back the claims of its own worker whose answer was lost
// (ReleaseOrphans).
//
// Every interval the fleet's sweeper (the worker of the lowest held lease:
// see sendstate.Renewal) also applies the delivery events that came before
// their send was recorded, ends the leases of workers that stopped renewing
// them (ExpireLeases), and rescues the intents and batches that such
// workers left sending (RescueAbandoned), and every few intervals
// (reconcileEvery, reconcileBatchesEvery) it gives a new job to intents and
// batches whose job ended without them (Reconcile): nothing is left where
// nothing will move it.
// One worker does it for the fleet, not each of them (issue 23: three
// workers made three times the statements for nothing). When the sweeper
// dies, the next worker takes over at its first renewal past the dead
// lease's end (the lease, and a renewal timed for it: see liveness), and
// sweeps at once (kick), ending that lease; a worker that stops ends its
// lease at once, and the next takes over within a beat of its lease (a
// third of it). The sweeper times a sweep for the end of the first of the
// other leases (leaseEnd), so a worker that dies is found dead at its
// lease's end, not up to an interval later. Until a worker's first renewal it sweeps as the sweeper, so a
// worker alone does everything from its start.
//
// Every worker creates the runs of due schedules every interval, if it has
// producers of its own: a schedule of a producer is created only by a
// worker that has it (the sweeper may not). Schedules with no producer are
// the sweeper's, and any such worker's (each schedule is taken FOR UPDATE
// SKIP LOCKED).
type sweeper struct {
	pool      *pgxpool.Pool
	jobs      *sendstate.Scheduler
	drain     *drain // woken by every notification and every interval
	schedules *ticker
	interval  time.Duration
	logger    *slog.Logger
	sweeps    int
	// role says whether this worker is the fleet's sweeper now, and its
	// lease's id (nil: it is the sweeper, with no lease).
	role interface {
		sweeps() bool
		leaseID() int32
	}
	// kick asks for a sweep now: this worker has just become the fleet's
	// sweeper (liveness.promoted), most likely because the sweeper died,
	// and what it left is to be rescued without waiting for an interval.
	kick chan struct{}
	// leaseEnd is when the first of the other workers' held leases ends
	// unless renewed, by this process's clock, as the last sweep saw it
	// (zero: none, or this worker is not the sweeper). The next sweep is
	// timed for it, when it comes before the interval's end: a worker that
	// died is found dead, and what it left sending is rescued, at once.
	leaseEnd time.Time

	restartGrace time.Duration
	pollOnly     bool
	// lastEnded is when the last lease of the fleet ended, as the last
	// sweep saw it: a later one means a worker ended since.
	lastEnded time.Time
}

// leaseEndMargin is how long after a lease's end, as the database reported
// it, the sweep timed for that end runs, so that the database's clock has
// passed it too.
const leaseEndMargin = 10 * time.Millisecond

// sweepNetEvery is how many sweeps pass between two runs of the rescues
// (and of the orphans' look) that nothing called for: the net under the
// signals that call for them, and the pace of the tally's compaction.
const sweepNetEvery = 10

// orphanLookFor is how long after a failed claim the worker looks for its
// orphans at every sweep: past orphanAge, with room for a slow sweep.
const orphanLookFor = 3 * orphanAge

// reconcileEvery is how many sweeps pass between two calls of Reconcile:
// each reads one window of the unsent intents (sendstate's
// DefaultReconcileBudget), 5,000 every 3 s, so a backlog of any size costs
// the same per second, and a pass over a backlog of 1,000,000 takes ten
// minutes.
const reconcileEvery = 3

// reconcileBatchesEvery is how many sweeps pass between two calls of
// ReconcileBatches: a batch job ending without its batch is rare, and the
// check reads every unsent batch.
const reconcileBatchesEvery = 30

func (s *sweeper) run(ctx context.Context) {
	if s.pollOnly {
		s.poll(ctx)
		return
	}
	for ctx.Err() == nil {
		err := s.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("sweeper: lost its connection, reconnecting", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(s.interval):
		}
	}
}

// listen holds one connection with LISTEN on it: it gives jobs to rows
// inserted by SQL on every notification, and sweeps every interval, until
// the connection fails or ctx ends.
func (s *sweeper) listen(ctx context.Context) error {
	s.sweep(ctx)
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection that has been LISTENing is not handed back to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+sendstate.NotifyChannel); err != nil {
		return err
	}
	// Rows inserted before the LISTEN, while no notification reached this
	// worker.
	s.drain.wake()
	next := s.next()
	for {
		notified, err := s.wait(ctx, conn, next)
		switch {
		case err != nil:
			return err
		case notified:
			s.drain.wake()
		default:
			s.sweep(ctx)
			next = s.next()
		}
	}
}

// next is when the sweep after the one that just ended is due: an interval
// from now, or just after the first of the other leases ends, if sooner.
func (s *sweeper) next() time.Time {
	next := time.Now().Add(s.interval)
	if end := s.leaseEnd.Add(leaseEndMargin); !s.leaseEnd.IsZero() && end.Before(next) {
		next = end
	}
	return next
}

// kicked asks for a sweep now (see kick).
func (s *sweeper) kicked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// wait waits on conn for a notification until the next sweep is due, at
// until or when a kick comes. It returns true for a notification, false
// for a sweep due; an error when the connection failed or ctx ended.
func (s *sweeper) wait(ctx context.Context, conn *pgx.Conn, until time.Time) (notified bool, err error) {
	waitCtx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	kicked := make(chan bool, 1)
	go func() {
		select {
		case <-s.kick:
			cancel()
			kicked <- true
		case <-waitCtx.Done():
			kicked <- false
		}
	}()
	// A wait cut off by its context leaves the connection usable: pgconn
	// closes it only for errors other than a timeout.
	_, err = conn.WaitForNotification(waitCtx)
	cancel()
	kick := <-kicked
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case err == nil:
		if kick {
			s.kicked() // taken while a notification came: still due
		}
		return true, nil
	case kick || errors.Is(err, context.DeadlineExceeded):
		return false, nil
	}
	return false, err
}

// poll sweeps every interval without LISTEN (Config.PollOnly): a row
// inserted by SQL waits for the sweeper's next sweep.
func (s *sweeper) poll(ctx context.Context) {
	t := time.NewTimer(s.interval)
	defer t.Stop()
	for {
		s.sweep(ctx)
		t.Reset(time.Until(s.next()))
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
	}
}

// sweep is the work of one interval: all of it on the fleet's sweeper, the
// schedules of this worker's producers on the others.
func (s *sweeper) sweep(ctx context.Context) {
	defer func() { s.sweeps++ }()
	// Retries and send times that came due since, and rows whose
	// notification was missed.
	s.drain.wake()
	// Every worker, not only the fleet's sweeper: only this one knows
	// what it has in flight. An orphan comes only of a claim whose answer
	// was lost, so the look is made after a failed claim (for a while:
	// the orphan must be orphanAge old), and every sweepNetEvery sweeps.
	if s.drain.claimFailedWithin(orphanLookFor) || s.sweeps%sweepNetEvery == 0 {
		s.do(ctx, s.drain.releaseOrphans, "release orphans", "gave back drained intents this worker claimed "+
			"but never took up (the claim's answer was lost with the connection); they are sent again with the same key")
	}
	if s.role != nil && !s.role.sweeps() {
		s.leaseEnd = time.Time{}
		if len(s.schedules.producers) > 0 {
			s.do(ctx, s.schedules.tick, "schedules", "created the runs of due schedules")
		}
		return
	}
	s.do(ctx, s.schedules.tick, "schedules", "created the runs of due schedules")
	matchEvents := func(ctx context.Context) (int, error) { return sendstate.MatchEvents(ctx, s.pool) }
	s.do(ctx, matchEvents, "match events", "applied delivery events that came before their send was recorded")
	// The rescues hand on what ended leases left: they run in a sweep
	// in which a lease ended (lapsed here, or stopped by its worker: the
	// last end moved), and every sweepNetEvery sweeps besides (a rescue
	// held back by the restart grace, or one that failed). A quiet fleet
	// makes one statement a sweep for all of them.
	var ended bool
	var self int32
	if s.role != nil {
		self = s.role.leaseID()
	}
	expire := func(ctx context.Context) (int, error) {
		look, err := s.jobs.ExpireLeasesAndLook(ctx, s.restartGrace, self)
		s.leaseEnd = time.Time{}
		if err == nil {
			ended = look.Expired > 0 || look.LastEnded.After(s.lastEnded)
			s.lastEnded = look.LastEnded
			if look.NextEnd > 0 {
				s.leaseEnd = time.Now().Add(look.NextEnd)
			}
		}
		return look.Expired, err
	}
	s.do(ctx, expire, "expire leases", "ended the leases of workers that stopped renewing them; their intents go to other jobs")
	net := s.sweeps%sweepNetEvery == 0
	if ended || net {
		s.rescue(ctx)
	}
	if net {
		compact := func(ctx context.Context) (int, error) {
			_, err := sendstate.CompactTally(ctx, s.pool)
			return 0, err
		}
		s.do(ctx, compact, "compact tally", "")
		forget := func(ctx context.Context) (int, error) { return 0, s.jobs.ForgetEndedLeases(ctx) }
		s.do(ctx, forget, "forget leases", "")
	}
	if s.sweeps%reconcileEvery == 0 {
		s.do(ctx, s.jobs.Reconcile, "reconcile", "gave a new job to intents whose job ended without sending them")
	}
	if s.sweeps%reconcileBatchesEvery == 0 {
		s.do(ctx, s.jobs.ReconcileBatches, "reconcile batches", "gave a new job to batches whose job ended without sending them")
	}
}

// rescue hands on what workers whose leases ended left: intents and
// batches left sending, and jobs left running.
func (s *sweeper) rescue(ctx context.Context) {
	rescue := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandoned(ctx, s.restartGrace) }
	s.do(ctx, rescue, "rescue", "rescued intents a crashed worker left sending; they are sent again with the same key")
	drained := func(ctx context.Context) (int, error) {
		n, err := sendstate.RescueDrained(ctx, s.pool, s.restartGrace)
		if n > 0 {
			s.drain.wake()
		}
		return n, err
	}
	s.do(ctx, drained, "rescue drained", "rescued drained intents a crashed worker left sending; they are sent again with the same key")
	stranded := func(ctx context.Context) (int, error) { return s.jobs.RescueStranded(ctx, s.restartGrace) }
	s.do(ctx, stranded, "rescue stranded", "gave new jobs to pending intents whose jobs a crashed worker was running; they are sent at once")
	s.do(ctx, func(ctx context.Context) (int, error) { return s.jobs.RescueStrandedBatches(ctx, s.restartGrace) }, "rescue stranded batches", "gave new jobs to pending batches whose jobs a crashed worker was running; they are sent at once, whole, with the same key")
	rescueBatches := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandonedBatches(ctx, s.restartGrace) }
	s.do(ctx, rescueBatches, "rescue batches", "rescued batches a crashed worker left sending; they are sent again whole, with the same key")
}

func (s *sweeper) do(ctx context.Context, fn func(context.Context) (int, error), op, done string) {
	n, err := fn(ctx)
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("sweeper: "+op+" failed", "error", err)
		return
	}
	if n > 0 {
		s.logger.Info("sweeper: "+done, "count", n)
	}
}

// pruner runs retention (Config.Retain) every interval. Each of its
// transactions takes sendstate.PruneLockKey, so one worker of the fleet
// prunes at a time, and none holds its locks for long.
type pruner struct {
	pool     *pgxpool.Pool
	opts     sendstate.PruneOptions
	interval time.Duration
	logger   *slog.Logger
}

func (p *pruner) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		res, err := sendstate.Prune(ctx, p.pool, p.opts)
		switch {
		case err != nil && ctx.Err() == nil:
			p.logger.Warn("sweeper: prune failed", "error", err)
		case res != (sendstate.PruneResult{}):
			p.logger.Info("sweeper: pruned settled intents past retention, leaving their keys' tombstones",
				"intents", res.Intents, "events", res.Events, "batches", res.Batches, "runs", res.Runs, "tombstones", res.Tombstones, "unsubscribe_events", res.UnsubscribeEvents,
				"rested", res.Rested.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
