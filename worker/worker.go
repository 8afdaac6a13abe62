package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/budget"
	"github.com/sendonce/sendonce/internal/sendjob"
	"github.com/sendonce/sendonce/internal/sendstate"
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
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

// New builds a Worker over the application's database. Start it with Start.
// A nil cfg, or a nil Config.Client, uses a client configured from the
// environment (OPENEMAIL_API_KEY, OPENEMAIL_BASE_URL), and a nil
// Config.Logger logs through slog.Default().
//
// New reads the database's migration versions (within newCheckTimeout): on a
// database that was not migrated, or not to this code's schema, it returns
// an error matching migrations.ErrPending (errors.Is), which says to run
// `sendonce migrate` or migrations.Up.
func New(pool *pgxpool.Pool, cfg *Config) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("worker: a database pool is required")
	}
	if err := checkMigrated(pool); err != nil {
		return nil, err
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
	queue := cfg.Queue
	if queue == "" {
		queue = outbox.DefaultQueue
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	jobTimeout := cfg.JobTimeout
	if jobTimeout <= 0 {
		jobTimeout = DefaultJobTimeout
	}
	rescueAfter := cfg.RescueAfter
	if rescueAfter <= 0 {
		rescueAfter = jobTimeout + time.Minute
	}
	if rescueAfter <= jobTimeout {
		return nil, fmt.Errorf("worker: rescue-after (%s) must exceed job-timeout (%s)", rescueAfter, jobTimeout)
	}
	concurrency := cfg.Concurrency
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	cooldown := cfg.FetchCooldown
	if cooldown <= 0 {
		cooldown = DefaultFetchCooldown
	}
	sweepInterval := cfg.SweepInterval
	if sweepInterval <= 0 {
		sweepInterval = DefaultSweepInterval
	}

	if cfg.Send.MaxAttempts > MaxAttempts {
		return nil, fmt.Errorf("worker: max attempts %d: want at most %d, below the River job's own limit of %d",
			cfg.Send.MaxAttempts, MaxAttempts, sendjob.MaxAttempts)
	}
	if cfg.Send.ReplayWindow > outbox.MaxReplayWindow {
		return nil, fmt.Errorf("worker: replay window %s: want at most %s, the time the API keeps an idempotency key",
			cfg.Send.ReplayWindow, outbox.MaxReplayWindow)
	}
	switch cfg.Send.PartlySuppressed {
	case "", PartlySuppressedSend, PartlySuppressedPark:
	default:
		return nil, fmt.Errorf("worker: partly suppressed %q: want %q or %q",
			cfg.Send.PartlySuppressed, PartlySuppressedSend, PartlySuppressedPark)
	}
	restartGrace := cfg.RestartGrace
	if restartGrace <= 0 {
		restartGrace = sendstate.DefaultRestartGrace
	}
	if cfg.Lease < 0 || (cfg.Lease > 0 && cfg.Lease < 500*time.Millisecond) {
		return nil, fmt.Errorf("worker: lease %s: want 500ms or more (0: the default, %s)", cfg.Lease, DefaultLease)
	}
	lease := cfg.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	sendCfg := cfg.Send
	if sendCfg.Logger == nil {
		sendCfg.Logger = logger
	}
	if cfg.Send.MaxPause < 0 {
		return nil, fmt.Errorf("worker: max pause %s: want a positive duration (0: the default, %s)", cfg.Send.MaxPause, DefaultMaxPause)
	}
	for _, l := range cfg.RateLimits {
		if err := l.check(); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	if cfg.Coalesce < 0 || cfg.Coalesce > MaxCoalesce {
		return nil, fmt.Errorf("worker: coalesce %d: want 0 (off) to %d, the API's batch limit", cfg.Coalesce, MaxCoalesce)
	}
	if cfg.CoalesceWait < 0 {
		return nil, fmt.Errorf("worker: coalesce wait %s: want a positive duration", cfg.CoalesceWait)
	}
	coalesceWait := cfg.CoalesceWait
	if coalesceWait == 0 {
		coalesceWait = DefaultCoalesceWait
	}
	if cfg.Retain < 0 {
		return nil, fmt.Errorf("worker: retain %s: want a positive duration, or 0 for off", cfg.Retain)
	}
	if cfg.RetainKeys < 0 && cfg.RetainKeys != KeepKeysForever {
		return nil, fmt.Errorf("worker: retain keys %s: want a positive duration, 0 for the default or KeepKeysForever", cfg.RetainKeys)
	}
	retainKeys := cfg.RetainKeys
	switch retainKeys {
	case 0:
		retainKeys = DefaultRetainKeys
	case KeepKeysForever:
		retainKeys = 0
	}
	pruneInterval := cfg.PruneInterval
	if pruneInterval <= 0 {
		pruneInterval = DefaultPruneInterval
	}
	sendWorker := newSendWorker(pool, c, &sendCfg)
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	sendWorker.tracer = tp.Tracer(tracerName)
	sendWorker.budget = budget.New(pool, c.KeyFingerprint(), budget.Config{
		Rate: budgetRate(cfg.RateLimits), Quotas: budgetQuotas(cfg.RateLimits), QuotaZone: cfg.QuotaZone,
		MaxPause: sendWorker.cfg.MaxPause, Logger: logger, Now: cfg.now})
	batcher := &sendstate.Batcher{Pool: pool}
	workers := river.NewWorkers()
	// The batch worker is always there: a batch frozen by a coalescing
	// worker is sent by any worker of the fleet.
	if err := river.AddWorkerSafely(workers, sendWorker); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &batchWorker{w: sendWorker, batcher: batcher}); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{queue: {MaxWorkers: concurrency}},
		Workers:              workers,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: rescueAfter,
		FetchCooldown:        cooldown,
		FetchPollInterval:    cfg.FetchPollInterval,
		PollOnly:             cfg.PollOnly,
		Logger:               logger,
		// The job's span; the send's span is its child.
		Middleware: []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: tp, EnableWorkSpanJobKindSuffix: true,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("worker: river client: %w", err)
	}
	batcher.River = rc
	jobs := &sendstate.Scheduler{Pool: pool, River: rc, Queue: queue}
	ob, err := outbox.New(pool, &outbox.Config{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	for name, p := range cfg.Producers {
		if p == nil {
			return nil, fmt.Errorf("worker: producer %q is nil", name)
		}
	}
	schedules := &ticker{pool: pool, outbox: ob, producers: cfg.Producers, logger: logger}
	return &Worker{
		river:        rc,
		sendWorker:   sendWorker,
		batcher:      batcher,
		coalesce:     cfg.Coalesce,
		coalesceWait: coalesceWait,
		pool:         pool,
		sweeper: &sweeper{pool: pool, jobs: jobs, schedules: schedules, interval: sweepInterval, logger: logger,
			restartGrace: restartGrace, pollOnly: cfg.PollOnly},
		liveness: newLiveness(pool, lease, logger),
		pruner: &pruner{pool: pool, interval: pruneInterval, logger: logger,
			opts: sendstate.PruneOptions{Retain: cfg.Retain, RetainKeys: retainKeys}},
	}, nil
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
	// The batcher and the sweeper live until Stop, past ctx: sends in
	// flight when ctx ends still record their outcome.
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := w.liveness.start(ctx, w.river.ID()); err != nil {
		cancel()
		return err
	}
	w.sendWorker.lease = w.liveness
	w.sendWorker.batch = newBatcher(bgCtx, w.pool, w.sendWorker.claimOptions)
	if w.coalesce >= 2 {
		w.sendWorker.coalesce = newCoalescer(bgCtx, w.batcher, w.coalesce, w.coalesceWait, w.sendWorker.cfg.Logger)
	}
	if err := w.river.Start(ctx); err != nil {
		cancel()
		_ = w.liveness.release(context.WithoutCancel(ctx))
		return fmt.Errorf("worker: start river: %w", err)
	}
	w.cancel = cancel
	w.done.Go(func() { w.liveness.run(bgCtx) })
	w.done.Go(func() { w.sweeper.run(bgCtx) })
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
	err := w.river.Stop(ctx)
	if err != nil && ctx.Err() != nil {
		hardCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = w.river.StopAndCancel(hardCtx)
	}
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
