package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
)

// Worker drains the outbox: a River client working the send queue, and a
// sweeper for rows inserted without a job.
type Worker struct {
	river        *river.Client[pgx.Tx]
	sendWorker   *sendWorker
	batcher      *sendstate.Batcher
	coalesce     int
	coalesceWait time.Duration
	pool         *pgxpool.Pool
	sweeper      *sweeper
	pruner       *pruner
	liveness     *liveness
	drain        *drain
	report       *report
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

// New builds a Worker over the application's database. Start it with Start.
// A nil cfg, or a nil Config.Client, uses a client configured from the
// environment (OPENEMAIL_API_KEY, OPENEMAIL_BASE_URL), and a nil
// Config.Logger logs through slog.Default().
//
// New refuses a client whose base URL is plain http to a host off this
// machine (an error wrapping client.ErrInsecureBaseURL), as `sendonce work`
// does: the client would refuse every send, and every intent would be
// parked as failed, one by one, after the worker started.
//
// New reads the database's migration versions (within newCheckTimeout): on a
// database that was not migrated, or not to this code's schema, it returns
// an error matching migrations.ErrPending (errors.Is), which says to run
// `sendonce migrate` or migrations.Up.
func New(pool *pgxpool.Pool, cfg *Config) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("worker: a database pool is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.Client
	if c == nil {
		var err error
		if c, err = client.New(); err != nil {
			return nil, fmt.Errorf("worker: no Config.Client, and none from the environment: %w", err)
		}
	}
	if err := c.CheckBaseURL(); err != nil {
		return nil, fmt.Errorf("worker: the client's base URL: %w: use https, or a loopback address for a local fake API", err)
	}
	if err := checkMigrated(pool); err != nil {
		return nil, err
	}
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	logger := conf.Logger
	rep := newReport(conf.Send.Observer, conf.Queue, conf.reportInterval)
	conf.Send.Observer = rep
	sendWorker := newSendWorker(pool, c, &conf.Send)
	sendWorker.riverLog = newRiverLog(logger)
	sendWorker.onStatus = conf.OnStatus
	sendWorker.queue = conf.Queue
	sendWorker.sends = make(chan struct{}, conf.Concurrency)
	sendWorker.tracer = conf.TracerProvider.Tracer(tracerName)
	sendWorker.budget = budget.New(pool, c.KeyFingerprint(), budget.Config{
		Rate: budgetRate(conf.RateLimits), Quotas: budgetQuotas(conf.RateLimits), QuotaZone: conf.QuotaZone,
		MaxPause: sendWorker.cfg.MaxPause, Logger: logger, Now: conf.now})
	batcher := &sendstate.Batcher{Pool: pool, Unsubscribe: sendWorker.signer}
	rc, err := newRiverClient(pool, &conf, sendWorker, batcher)
	if err != nil {
		return nil, err
	}
	batcher.River = rc
	jobs := &sendstate.Scheduler{Pool: pool, River: rc, Queue: conf.Queue}
	ob, err := outbox.New(pool, &outbox.Config{Queue: conf.Queue})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	schedules := &ticker{pool: pool, outbox: ob, producers: conf.Producers, logger: logger}
	retainKeys := conf.RetainKeys
	if retainKeys == KeepKeysForever {
		retainKeys = 0 // sendstate.PruneOptions: zero keeps them
	}
	lease := newLiveness(pool, conf.Lease, logger)
	dr := &drain{w: sendWorker, slots: conf.Concurrency, timeout: conf.JobTimeout, interval: conf.SweepInterval}
	if conf.Coalesce >= 2 {
		sendWorker.coalesceWait = conf.CoalesceWait
		dr.coalesce = newDueCoalescer(batcher, conf.Queue, conf.Coalesce, conf.CoalesceWait, logger, sendWorker.cfg.Observer)
		dr.coalesce.wake = dr.wake
	}
	sendWorker.dueIn = dr.wakeIn
	sw := &sweeper{pool: pool, jobs: jobs, drain: dr, schedules: schedules, interval: conf.SweepInterval, logger: logger,
		restartGrace: conf.RestartGrace, pollOnly: conf.PollOnly, role: lease, kick: make(chan struct{}, 1)}
	lease.promoted = sw.kicked
	lease.troubled = dr.connectionLost
	lease.report = dr.fair.recent.report
	return &Worker{
		report:       rep,
		drain:        dr,
		river:        rc,
		sendWorker:   sendWorker,
		batcher:      batcher,
		coalesce:     conf.Coalesce,
		coalesceWait: conf.CoalesceWait,
		pool:         pool,
		sweeper:      sw,
		liveness:     lease,
		pruner: &pruner{pool: pool, interval: conf.PruneInterval, logger: logger,
			opts: sendstate.PruneOptions{Retain: conf.Retain, RetainKeys: retainKeys}},
	}, nil
}

// newRiverClient is the River client that works the send queue, with the
// send and batch workers registered. The batch worker is always there: a
// batch frozen by a coalescing worker is sent by any worker of the fleet.
func newRiverClient(pool *pgxpool.Pool, conf *Config, sendWorker *sendWorker, batcher *sendstate.Batcher) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, sendWorker); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &batchWorker{w: sendWorker, batcher: batcher}); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, drainReportWorker{}); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{conf.Queue: {MaxWorkers: conf.Concurrency}},
		Workers:              workers,
		JobTimeout:           conf.JobTimeout,
		RescueStuckJobsAfter: conf.RescueAfter,
		FetchCooldown:        conf.FetchCooldown,
		FetchPollInterval:    conf.FetchPollInterval,
		PollOnly:             conf.PollOnly,
		Logger:               sendWorker.riverLog.logger, // conf.Logger, less what the worker logged already
		// The job's span; the send's span is its child.
		Middleware: []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: conf.TracerProvider, EnableWorkSpanJobKindSuffix: true,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("worker: river client: %w", err)
	}
	return rc, nil
}

// newCheckTimeout bounds New's look at the migration versions (New has no
// context of its own).
const newCheckTimeout = 30 * time.Second

// checkMigrated refuses a database with migrations pending, River's or
// sendonce's: without it the worker would fail only at Start, on a missing
// sequence, or later, on a missing column.
func checkMigrated(pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), newCheckTimeout)
	defer cancel()
	pending, err := migrations.Pending(ctx, pool)
	switch {
	case err != nil:
		return fmt.Errorf("worker: check the database's migrations: %w", err)
	case pending:
		return fmt.Errorf("worker: %w", migrations.ErrPending)
	}
	return nil
}

// RiverClient returns the worker's River client, for what works with one:
// the River UI (riverui.NewEndpoints), subscriptions to job events. Do not
// stop it directly: Stop does.
func (w *Worker) RiverClient() *river.Client[pgx.Tx] { return w.river }

// Start starts fetching and sending, and the sweeper.
func (w *Worker) Start(ctx context.Context) error {
	ctx = sendstate.WithStatusHook(ctx, w.sendWorker.onStatus)
	// The batcher and the sweeper live until Stop, past ctx: sends in
	// flight when ctx ends still record their outcome.
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := w.liveness.start(ctx, w.river.ID()); err != nil {
		cancel()
		return err
	}
	w.sendWorker.lease = w.liveness
	var freeze func(context.Context)
	if w.drain.coalesce != nil {
		freeze = w.drain.freeze
	}
	w.sendWorker.batch = newBatcher(w.pool, w.sendWorker.claimOptions, freeze)
	w.drain.fair.wakeIn = w.drain.wakeIn
	w.sendWorker.batch.fair = &w.drain.fair
	if w.sendWorker.budget != nil {
		w.sendWorker.batch.paced = w.drain.paced
	}
	w.done.Go(func() { w.sendWorker.batch.loop(bgCtx) })
	if w.coalesce >= 2 {
		w.sendWorker.coalesce = newCoalescer(bgCtx, w.batcher, w.coalesce, w.coalesceWait, w.sendWorker.cfg.Logger)
	}
	if err := w.river.Start(ctx); err != nil {
		cancel()
		_ = w.liveness.release(context.WithoutCancel(ctx))
		return fmt.Errorf("worker: start river: %w", err)
	}
	w.cancel = cancel
	w.drain.start(bgCtx)
	w.done.Go(func() { w.liveness.run(bgCtx) })
	w.done.Go(func() { w.sweeper.run(bgCtx) })
	w.done.Go(func() { w.report.run(bgCtx, w.river) })
	if w.pruner.opts.Retain > 0 {
		w.done.Go(func() { w.pruner.run(bgCtx) })
	}
	return nil
}

// Stop stops fetching new jobs and waits for the sends in flight to
// finish; when ctx ends first, the sends still running are cancelled (their
// jobs go back to River without losing anything: a cancelled send is
// retried with the same key). It returns once everything has stopped, and
// ends the instance's lease at once: whatever it left sending goes to
// other workers at their next sweep.
func (w *Worker) Stop(ctx context.Context) error {
	// Sends waiting for the budget give their slots back at once (snoozed,
	// before their claim: no attempt), so the stop waits only for sends
	// on the wire, however many wait.
	if w.sendWorker.budget != nil {
		w.sendWorker.budget.Close()
	}
	drained := make(chan struct{})
	go func() { w.drain.halt(ctx); close(drained) }()
	err := w.river.Stop(ctx)
	if err != nil && ctx.Err() != nil {
		hardCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = w.river.StopAndCancel(hardCtx)
	}
	<-drained
	// Only now, with no send left running, stop the batcher and sweeper.
	if w.cancel != nil {
		w.cancel()
	}
	w.done.Wait()
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := w.liveness.release(relCtx); rerr != nil {
		w.sendWorker.cfg.Logger.Warn("worker: cannot end its lease; other workers take its intents once it lapses", "error", rerr)
	}
	return err
}
