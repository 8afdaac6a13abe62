package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// sweeper gives River jobs to rows inserted by plain SQL. It listens on the
// table trigger's channel, so such a row is picked up at once, and also
// sweeps every interval, so a missed notification (a dropped connection, a
// restarted database) only delays a send.
//
// Every interval it also creates the runs of due schedules, applies the
// delivery events that came before their send was recorded, ends the leases
// of workers that stopped renewing them (ExpireLeases), and rescues the
// intents and batches that such workers left sending (RescueAbandoned),
// and every reconcileEvery intervals it gives a new job to intents and
// batches whose job ended without them (Reconcile): nothing is left where
// nothing will move it.
type sweeper struct {
	pool      *pgxpool.Pool
	jobs      *sendstate.Scheduler
	schedules *ticker
	interval  time.Duration
	logger    *slog.Logger
	sweeps    int

	restartGrace time.Duration
	pollOnly     bool
}

// reconcileEvery is how many sweeps pass between two reconciliations: a
// job ending without its intent is rare, and the check reads every
// unsent intent.
const reconcileEvery = 30

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

// listen holds one connection with LISTEN on it and sweeps on every
// notification or interval, until the connection fails or ctx ends.
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
	for {
		waitCtx, cancel := context.WithTimeout(ctx, s.interval)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		s.sweep(ctx)
	}
}

// poll sweeps every interval without LISTEN (Config.PollOnly): a row
// inserted by SQL waits for the next sweep.
func (s *sweeper) poll(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sweeper) sweep(ctx context.Context) {
	s.do(ctx, s.schedules.tick, "schedules", "created the runs of due schedules")
	matchEvents := func(ctx context.Context) (int, error) { return sendstate.MatchEvents(ctx, s.pool) }
	s.do(ctx, matchEvents, "match events", "applied delivery events that came before their send was recorded")
	s.do(ctx, s.jobs.Sweep, "sweep", "scheduled intents inserted by SQL")
	expire := func(ctx context.Context) (int, error) { return s.jobs.ExpireLeases(ctx, s.restartGrace) }
	s.do(ctx, expire, "expire leases", "ended the leases of workers that stopped renewing them; their intents go to other jobs")
	rescue := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandoned(ctx, s.restartGrace) }
	s.do(ctx, rescue, "rescue", "rescued intents a crashed worker left sending; they are sent again with the same key")
	stranded := func(ctx context.Context) (int, error) { return s.jobs.RescueStranded(ctx, s.restartGrace) }
	s.do(ctx, stranded, "rescue stranded", "gave new jobs to pending intents whose jobs a crashed worker was running; they are sent at once")
	rescueBatches := func(ctx context.Context) (int, error) { return s.jobs.RescueAbandonedBatches(ctx, s.restartGrace) }
	s.do(ctx, rescueBatches, "rescue batches", "rescued batches a crashed worker left sending; they are sent again whole, with the same key")
	compact := func(ctx context.Context) (int, error) {
		_, err := sendstate.CompactTally(ctx, s.pool)
		return 0, err
	}
	s.do(ctx, compact, "compact tally", "")
	if s.sweeps%reconcileEvery == 0 {
		s.do(ctx, s.jobs.Reconcile, "reconcile", "gave a new job to intents whose job ended without sending them")
		s.do(ctx, s.jobs.ReconcileBatches, "reconcile batches", "gave a new job to batches whose job ended without sending them")
	}
	s.sweeps++
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
				"intents", res.Intents, "events", res.Events, "batches", res.Batches, "runs", res.Runs, "tombstones", res.Tombstones, "unsubscribe_events", res.UnsubscribeEvents)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
