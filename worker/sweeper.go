package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// sweeper wakes the worker's drain. It listens on the channel producers
// notify when they write an intent due now (EnqueueMany's statement, the
// plain-SQL producers' trigger), so a new intent is claimed at once by the
// drains that hear of it; the drain wakes itself when the next intent it
// knows of comes due (drain.wakeIn), and the sweeper wakes it every
// quietNetEvery intervals too (every interval polling), so that a missed
// notification (a dropped connection, a restarted database) is caught. It
// also gives back the claims of its own worker whose answer was lost
// (ReleaseOrphans), after a failed claim.
//
// The fleet's sweeper (the worker of the lowest held lease:
// see sendstate.Renewal) also applies the delivery events that came before
// their send was recorded, ends the leases of workers that stopped renewing
// them (ExpireLeases), and rescues the intents and batches that such
// workers left sending (RescueAbandoned), each when something calls for
// it or on its net (see sweep), and every few intervals
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
// lease's end, not up to an interval later. Until a worker's first
// renewal it sweeps as the sweeper, so a worker alone does everything from
// its start.
//
// Every worker creates the runs of due schedules when the first comes due
// (and looks every sweepNetEvery intervals), if it has producers of its
// own: a schedule of a producer is created only by a
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
	// overdue says the last look found a lease past its end that it could
	// not end (the restart grace): the next sweep looks again.
	overdue bool
	// rescueFailed says a rescue failed: the next sweep runs them again.
	rescueFailed bool
	// swept says the last sweep was the fleet's sweeper's: one that is
	// not (this worker has just taken the role over) looks at the leases.
	swept bool
	// matched says the last match of early delivery events matched some:
	// the next sweep matches again.
	matched bool

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

// sweepNetEvery is how many sweeps pass, with LISTEN, between two looks at
// the schedules and two matches of early delivery events that nothing
// called for: a schedule written since the last look, a delivery event
// whose send was recorded since it came.
const sweepNetEvery = 10

// quietNetEvery is how many sweeps pass, with LISTEN, between two wakes of
// the drain and two looks at the leases that nothing called for: the net
// under the notifications (a dropped connection, a restarted database) and
// the due times that call for them.
const quietNetEvery = 30

// rescueNetEvery is how many sweeps pass between two runs of the rescues
// (and of the orphans' look) that nothing called for: the net under the
// signals that call for them, and the pace of the tally's compaction and
// of a new reconcile pass.
const rescueNetEvery = 60

// orphanLookFor is how long after a failed claim, or a lost connection,
// the worker looks for its orphans at every sweep: past orphanAge, with
// room for a slow sweep.
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
const reconcileBatchesEvery = rescueNetEvery

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
		s.drain.connectionLost()
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
	s.sweep(ctx, true)
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
		n, err := s.wait(ctx, conn, next)
		switch {
		case err != nil:
			return err
		case n != nil && n.Payload == sendstate.LeaseNotice:
			// A lease began (the sweeper learns its end) or ended
			// (what it left is rescued now).
			s.sweep(ctx, true)
			next = s.next()
		case n != nil:
			s.drain.wake()
		default:
			s.sweep(ctx, false)
			next = s.next()
		}
	}
}

// next is when the sweep after the one that just ended is due: an interval
// from now, or just after the first of the other leases ends, or when the
// first schedule comes due, if sooner.
func (s *sweeper) next() time.Time {
	next := time.Now().Add(s.interval)
	if end := s.leaseEnd.Add(leaseEndMargin); !s.leaseEnd.IsZero() && end.Before(next) {
		next = end
	}
	if due := s.schedules.next; !due.IsZero() && due.Before(next) {
		next = due
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
// until or when a kick comes. It returns the notification, or nil for a
// sweep due; an error when the connection failed or ctx ended.
func (s *sweeper) wait(ctx context.Context, conn *pgx.Conn, until time.Time) (*pgconn.Notification, error) {
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
	n, err := conn.WaitForNotification(waitCtx)
	cancel()
	kick := <-kicked
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err == nil:
		if kick {
			s.kicked() // taken while a notification came: still due
		}
		return n, nil
	case kick || errors.Is(err, context.DeadlineExceeded):
		return nil, nil
	}
	return nil, err
}

// poll sweeps every interval without LISTEN (Config.PollOnly): a row
// inserted by SQL waits for the sweeper's next sweep.
func (s *sweeper) poll(ctx context.Context) {
	t := time.NewTimer(s.interval)
	defer t.Stop()
	for {
		s.sweep(ctx, false)
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
// schedules of this worker's producers on the others. look asks for a
// look at the leases whatever else calls for one (a lease began or ended:
// LeaseNotice).
//
// A sweep makes only the statements something calls for. With LISTEN, a
// quiet fleet's sweeper looks at the leases when the first of them may
// lapse (leaseEnd), when one begins or ends, and every sweepNetEvery
// sweeps; it ticks the schedules when the first comes due (the ticker's
// next) and every sweepNetEvery sweeps (a schedule written since); it
// matches early delivery events every sweepNetEvery sweeps, and every
// sweep while they keep matching; and it wakes the drain, which sleeps
// until its next intent comes due or a notification, every sweepNetEvery
// sweeps (a missed notification). Polling (Config.PollOnly), it does all
// of that every sweep, as no notification tells it anything.
func (s *sweeper) sweep(ctx context.Context, look bool) {
	defer func() { s.sweeps++ }()
	net := s.pollOnly || s.sweeps%sweepNetEvery == 0
	quiet := s.pollOnly || s.sweeps%quietNetEvery == 0
	rare := s.sweeps%rescueNetEvery == 0
	if quiet {
		s.drain.wake()
	}
	// Every worker, not only the fleet's sweeper: only this one knows
	// what it has in flight. An orphan comes only of a claim whose answer
	// was lost, or of a mark a database crash lost, so the look is made
	// after a failed claim or a lost connection (for a while: the orphan
	// must be orphanAge old), and every rescueNetEvery sweeps.
	if s.drain.orphansWithin(orphanLookFor) || rare {
		s.do(ctx, s.drain.releaseOrphans, "release orphans", "gave back drained intents this worker claimed "+
			"but never took up (the claim's answer was lost with the connection); they are sent again with the same key")
	}
	// Delivery events that came before their send's record: every worker
	// that recorded a send since its last sweep matches them (within a
	// second of the record), and the fleet's sweeper every sweepNetEvery
	// sweeps, and every sweep while they keep matching.
	sweeps := s.role == nil || s.role.sweeps()
	if s.drain.w.recorded.Swap(false) || (sweeps && (net || s.matched)) {
		matchEvents := func(ctx context.Context) (int, error) {
			n, trips, err := sendstate.MatchEvents(ctx, s.pool)
			s.matched = n > 0
			for _, t := range trips {
				s.logger.Warn("run breaker tripped: run paused", "run", t.Run, "reason", t.Reason)
			}
			return n, err
		}
		s.do(ctx, matchEvents, "match events", "applied delivery events that came before their send was recorded")
	}
	ticks := net || s.schedules.due()
	if !sweeps {
		s.leaseEnd, s.overdue, s.swept = time.Time{}, false, false
		if len(s.schedules.producers) > 0 && ticks {
			s.do(ctx, s.schedules.timed, "schedules", "created the runs of due schedules")
		}
		return
	}
	if ticks {
		s.do(ctx, s.schedules.timed, "schedules", "created the runs of due schedules")
	}
	// The rescues hand on what ended leases left: they run in a sweep
	// in which a lease ended (lapsed here, or stopped by its worker: the
	// last end moved), after one of them failed, and every rescueNetEvery
	// sweeps besides. A quiet fleet makes one statement for all of them,
	// when a lease may have lapsed.
	lapsing := !s.leaseEnd.IsZero() && !time.Now().Before(s.leaseEnd)
	ended := s.rescueFailed
	if quiet || look || lapsing || s.overdue || s.rescueFailed || !s.swept {
		s.swept = true
		var self int32
		if s.role != nil {
			self = s.role.leaseID()
		}
		expire := func(ctx context.Context) (int, error) {
			look, err := s.jobs.ExpireLeasesAndLook(ctx, s.restartGrace, self)
			s.leaseEnd, s.overdue = time.Time{}, err != nil
			if err == nil {
				ended = ended || look.Expired > 0 || look.LastEnded.After(s.lastEnded)
				s.lastEnded, s.overdue = look.LastEnded, look.Overdue
				if look.NextEnd > 0 {
					s.leaseEnd = time.Now().Add(look.NextEnd)
				}
			}
			return look.Expired, err
		}
		s.do(ctx, expire, "expire leases", "ended the leases of workers that stopped renewing them; their intents go to other jobs")
	}
	if ended || rare {
		s.rescue(ctx)
	}
	if rare {
		compact := func(ctx context.Context) (int, error) {
			_, err := sendstate.CompactTally(ctx, s.pool)
			return 0, err
		}
		s.do(ctx, compact, "compact tally", "")
		forget := func(ctx context.Context) (int, error) { return 0, s.jobs.ForgetEndedLeases(ctx) }
		s.do(ctx, forget, "forget leases", "")
	}
	// A pass over the unsent intents with jobs of their own goes on every
	// reconcileEvery sweeps until it has read them all; then the next
	// starts at the rare net.
	if s.sweeps%reconcileEvery == 0 && (s.jobs.Reconciling() || rare) {
		s.do(ctx, s.jobs.Reconcile, "reconcile", "gave a new job to intents whose job ended without sending them")
	}
	if s.sweeps%reconcileBatchesEvery == 0 {
		s.do(ctx, s.jobs.ReconcileBatches, "reconcile batches", "gave a new job to batches whose job ended without sending them")
	}
}

// rescue hands on what workers whose leases ended left: intents and
// batches left sending, and jobs left running.
func (s *sweeper) rescue(ctx context.Context) {
	ok := true
	rescue := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandoned(ctx, s.restartGrace) }
	ok = s.do(ctx, rescue, "rescue", "rescued intents a crashed worker left sending; they are sent again with the same key") && ok
	drained := func(ctx context.Context) (int, error) {
		n, err := sendstate.RescueDrained(ctx, s.pool, s.restartGrace)
		switch {
		case n > 0:
			s.drain.wake() // RescueDrained told the other drains
		case err == nil:
			// Nothing was left sending, but a worker that ended may have
			// left retries and snoozes it recorded, whose times only its
			// own drain was waiting for: every drain reads its queue's
			// next due time again.
			err = sendstate.WakeDrains(ctx, s.pool)
		}
		return n, err
	}
	ok = s.do(ctx, drained, "rescue drained", "rescued drained intents a crashed worker left sending; they are sent again with the same key") && ok
	stranded := func(ctx context.Context) (int, error) { return s.jobs.RescueStranded(ctx, s.restartGrace) }
	ok = s.do(ctx, stranded, "rescue stranded", "gave new jobs to pending intents whose jobs a crashed worker was running; they are sent at once") && ok
	strandedBatches := func(ctx context.Context) (int, error) { return s.jobs.RescueStrandedBatches(ctx, s.restartGrace) }
	ok = s.do(ctx, strandedBatches, "rescue stranded batches", "gave new jobs to pending batches whose jobs a crashed worker was running; they are sent at once, whole, with the same key") && ok
	rescueBatches := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandonedBatches(ctx, s.restartGrace) }
	ok = s.do(ctx, rescueBatches, "rescue batches", "rescued batches a crashed worker left sending; they are sent again whole, with the same key") && ok
	s.rescueFailed = !ok
}

// do runs one duty of the sweep and logs what it did; it reports whether
// it succeeded.
func (s *sweeper) do(ctx context.Context, fn func(context.Context) (int, error), op, done string) bool {
	n, err := fn(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("sweeper: "+op+" failed", "error", err)
			// The database may be down, or back from a crash (polling,
			// no lost LISTEN connection tells the sweeper so).
			s.drain.connectionLost()
		}
		return false
	}
	if n > 0 {
		s.logger.Info("sweeper: "+done, "count", n)
	}
	return true
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
