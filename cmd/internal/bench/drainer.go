package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// DrainParams describe one drain: N jobs inserted up front (not timed),
// then a River client started and timed.
type DrainParams struct {
	// N is how many intents (or no-op jobs) to insert.
	N int
	// Concurrency is the worker's Concurrency, River's MaxWorkers.
	Concurrency int
	// FetchCooldown is River's FetchCooldown; zero keeps the worker's
	// default.
	FetchCooldown time.Duration
	// Latency is the fake API's added latency per request.
	Latency time.Duration
	// Window, when set, measures the steady rate: the completions between
	// Warmup and Warmup+Window after the start, over Window (ending early
	// if the queue runs dry). Zero times the burn-down of all N instead.
	Window, Warmup time.Duration
	// Timeout bounds the timed part (default 5 min).
	Timeout time.Duration
	// Suppressed, for DrainOutbox, is how many addresses are put on the
	// suppression list for the drain (none of them a recipient): a list
	// that is not empty makes every first claim look its intent's
	// recipients up.
	Suppressed int
	// Tenants, for DrainOutbox, spreads the intents over that many
	// tenants, round robin in the order they are enqueued (intent i is
	// tenant i mod Tenants's); 0 leaves them all the default tenant's.
	Tenants int
	// Grouped, with Tenants, enqueues each tenant's intents together (a
	// tenant's batch or run, committed at once), not round robin.
	Grouped bool
	// Hook, for DrainOutbox, gives the worker a status hook (OnStatus)
	// that does one UPDATE of HookTable per call: each sent intent's
	// row gets emailed_at and one more in emailed.
	Hook bool
}

// HookTable is the application's table of the status hook's drain.
const HookTable = "bench_invoices"

// DrainResult is what one drain measured.
type DrainResult struct {
	// N is how many jobs completed in the measured time.
	N int
	// Elapsed is the measured time.
	Elapsed time.Duration
	// CPU is the processor time spent in the measured time.
	CPU CPU
	// WAL is the bytes of write-ahead log the server wrote in the measured
	// time.
	WAL int64
	// Statements and Commits, for DrainOutbox, are the statements
	// (pg_stat_statements' calls; -1 without it) and the transactions
	// (pg_stat_database's xact_commit) of the benchmark database from the
	// start of the drain to its end, its pool closed.
	Statements, Commits int64
}

// Rate is jobs per second.
func (r DrainResult) Rate() float64 { return Rate(r.N, r.Elapsed) }

// CPUPerJob is the processor time per job, of this process and of the
// database backends.
func (r DrainResult) CPUPerJob() CPU {
	if r.N == 0 {
		return CPU{}
	}
	return CPU{Self: r.CPU.Self / time.Duration(r.N), DB: r.CPU.DB / time.Duration(r.N)}
}

// WALPerJob is the bytes of write-ahead log per job.
func (r DrainResult) WALPerJob() float64 {
	if r.N == 0 {
		return 0
	}
	return float64(r.WAL) / float64(r.N)
}

// String is the rate, the time and the costs per job, for the log.
func (r DrainResult) String() string {
	c := r.CPUPerJob()
	return fmt.Sprintf("%s/s (%s; per job: CPU process %s, database %s; WAL %s B)", Thousands(r.Rate()),
		r.Elapsed.Round(time.Millisecond), c.Self.Round(time.Microsecond), c.DB.Round(time.Microsecond), Thousands(r.WALPerJob()))
}

// finishedKinds are the River events that end a job's run; only
// completions are expected, and any other end is an error.
var finishedKinds = []river.EventKind{
	river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed,
}

// DrainOutbox warms the send budget (WarmBudget), enqueues p.N intents,
// then starts a sendonce worker against a fake API and times it: the full path of River job → worker → client →
// fake API → outbox row marked sent → job completed. After a burn-down it
// checks that every row is sent and that the fake delivered each intent
// once.
func DrainOutbox(ctx context.Context, env *Env, p DrainParams) (DrainResult, error) {
	if err := env.Reset(ctx); err != nil {
		return DrainResult{}, err
	}
	rate, err := env.WarmBudget(ctx)
	if err != nil {
		return DrainResult{}, err
	}
	env.Logf("drain: the budget's rate after the warm-up: %s/s", Thousands(rate))
	fake, err := StartFake(p.Latency, p.Concurrency)
	if err != nil {
		return DrainResult{}, err
	}
	defer fake.Close()
	pool, ob, err := env.NewOutbox(ctx, env.PoolConns)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	if p.Suppressed > 0 {
		if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason, source)
			SELECT 'blocked' || g || '@example.org', 'bounced', 'bench' FROM generate_series(1, $1) g`, p.Suppressed); err != nil {
			return DrainResult{}, fmt.Errorf("bench: fill the suppression list: %w", err)
		}
		defer env.Admin.Exec(context.WithoutCancel(ctx), `DELETE FROM sendonce_suppression WHERE source = 'bench'`)
	}
	intents := Intents("drain", p.N)
	if p.Tenants > 0 {
		for i := range intents {
			intents[i].Tenant = TenantName(i % p.Tenants)
			if p.Grouped {
				intents[i].Tenant = TenantName(i * p.Tenants / p.N)
			}
		}
	}
	if err := EnqueueBatches(ctx, pool, ob, intents, 1000); err != nil {
		return DrainResult{}, err
	}
	if p.Hook {
		if err := env.hookTable(ctx, intents); err != nil {
			return DrainResult{}, err
		}
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}

	s0, c0 := env.readStatements(ctx), env.readCommits(ctx)
	res, err := drainQueued(ctx, env, pool, fake, p)
	if err == nil {
		// The pool's backends report their transactions as they exit.
		pool.Close()
		res.Statements, res.Commits = env.readStatements(ctx)-s0, env.readCommits(ctx)-c0
		if s0 < 0 {
			res.Statements = -1
		}
	}
	res, err = checkDrained(ctx, env, fake, p, res, err)
	if err == nil && p.Hook {
		err = env.checkHookTable(ctx, p.N)
	}
	return res, err
}

// checkDrained is res, err of a drain of p.N intents, unless, after a
// burn-down, not every row is sent or the fake did not deliver each once.
func checkDrained(ctx context.Context, env *Env, fake *Fake, p DrainParams, res DrainResult, err error) (DrainResult, error) {
	if err != nil || p.Window > 0 {
		return res, err
	}
	sent, err := env.CountState(ctx, outbox.StateSent)
	if err != nil {
		return res, err
	}
	if delivered := len(fake.Server.Deliveries()); sent != p.N || delivered != p.N {
		return res, fmt.Errorf("bench: %d intents drained, but %d rows are sent and the fake delivered %d", p.N, sent, delivered)
	}
	return res, nil
}

// drainQueued starts a sendonce worker over pool against fake, for
// intents already queued, and times it as p says (p.N is how many
// sends end it).
func drainQueued(ctx context.Context, env *Env, pool *pgxpool.Pool, fake *Fake, p DrainParams) (DrainResult, error) {
	events, observe := outcomeEvents(p.N + 1000)
	cfg := &worker.Config{
		Client:        fake.Client,
		Concurrency:   p.Concurrency,
		FetchCooldown: p.FetchCooldown,
		Logger:        discard,
		Send:          worker.SendConfig{Observer: observe},
	}
	if p.Hook {
		cfg.OnStatus = invoicesEmailed
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return DrainResult{}, err
	}
	return timeDrain(ctx, env, p, events, w.Start, w.Stop)
}

// outcomeEvents is an observer of a worker's outcomes that turns each
// send's end into the event timeDrain counts: a completed job for a send
// recorded sent (fresh or replayed), a cancelled one for an intent parked.
// The worker tells its observer after the outcome's record, so the clock
// stops on durable state, as with River's completion events.
func outcomeEvents(size int) (<-chan *river.Event, worker.Observer) {
	events := make(chan *river.Event, size)
	return events, worker.ObserverFunc(func(o worker.Outcome) {
		switch o.Result {
		case worker.ResultSent, worker.ResultReplayed:
			events <- &river.Event{Kind: river.EventKindJobCompleted, Job: &rivertype.JobRow{}}
		case worker.ResultFailed, worker.ResultExpired, worker.ResultSuppressed:
			events <- &river.Event{Kind: river.EventKindJobCancelled, Job: &rivertype.JobRow{}}
		}
	})
}

// timeDrain starts a River client, times it as p says, and stops it. The
// completion events come from River after its completer has recorded each
// completion in the database, so the clock stops on durable state.
func timeDrain(ctx context.Context, env *Env, p DrainParams, events <-chan *river.Event,
	start, stop func(context.Context) error) (DrainResult, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Without a window, the measurement runs from the start to the last
	// completion; with one, from Warmup to Warmup+Window.
	var windowStart, windowEnd <-chan time.Time
	if p.Window > 0 {
		windowStart = time.After(p.Warmup)
		windowEnd = time.After(p.Warmup + p.Window)
	}
	wal0, err := env.ReadWAL(ctx)
	if err != nil {
		return DrainResult{}, err
	}
	cpu0, t0, done0 := env.ReadCPU(), time.Now(), 0
	if err := start(runCtx); err != nil {
		return DrainResult{}, err
	}
	done, measuring := 0, p.Window == 0
	var waitErr error
loop:
	for done < p.N {
		select {
		case ev, ok := <-events:
			if !ok {
				waitErr = errors.New("bench: River's event channel closed early")
				break loop
			}
			if ev.Kind != river.EventKindJobCompleted {
				waitErr = fmt.Errorf("bench: job %d ended %s, not completed", ev.Job.ID, ev.Kind)
				break loop
			}
			done++
		case <-windowStart:
			if wal0, waitErr = env.ReadWAL(runCtx); waitErr != nil {
				break loop
			}
			cpu0, t0, done0, measuring = env.ReadCPU(), time.Now(), done, true
		case <-windowEnd:
			break loop
		case <-runCtx.Done():
			waitErr = fmt.Errorf("bench: %d of %d jobs completed before the timeout: %w", done, p.N, runCtx.Err())
			break loop
		}
	}
	res := DrainResult{N: done - done0, Elapsed: time.Since(t0), CPU: env.ReadCPU().Sub(cpu0)}
	if waitErr == nil {
		res.WAL, waitErr = env.WALSince(ctx, wal0)
	}
	if !measuring {
		waitErr = errors.Join(waitErr, fmt.Errorf("bench: all %d jobs completed within the warm-up: insert more", p.N))
	}

	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	stopErr := stop(stopCtx)
	if waitErr != nil {
		return DrainResult{}, waitErr
	}
	if stopErr != nil {
		return DrainResult{}, fmt.Errorf("bench: stop: %w", stopErr)
	}
	return res, nil
}

// RawQueue is the River queue of the baselines' jobs (the no-op jobs and
// the River + client sends), apart from the outbox's queue.
const RawQueue = "bench_raw"

// NoopArgs are the raw baseline's job arguments.
type NoopArgs struct{}

// Kind is the job kind.
func (NoopArgs) Kind() string { return "bench_noop" }

// InsertOpts puts the jobs on RawQueue.
func (NoopArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: RawQueue} }

// NoopWorker does nothing: what remains is River's own cost per job.
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

// Work returns at once.
func (NoopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// DrainRiver is the baseline of DrainOutbox: raw River draining p.N no-op
// jobs, inserted up front with InsertManyFast, with the same MaxWorkers,
// FetchCooldown and pool size.
func DrainRiver(ctx context.Context, env *Env, p DrainParams) (DrainResult, error) {
	params := make([]river.InsertManyParams, p.N)
	for i := range params {
		params[i] = river.InsertManyParams{Args: NoopArgs{}}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, NoopWorker{})
	pool, err := env.freshPool(ctx)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	return drainJobs(ctx, env, p, pool, params, workers)
}

// SendArgs are the River + client baseline's job arguments: what an
// application without an outbox would put in a job of its own to send an
// email from it, the idempotency key and enough to build the email.
type SendArgs struct {
	Key   string `json:"key"`
	To    string `json:"to"`
	Order int    `json:"order"`
}

// Kind is the job kind.
func (SendArgs) Kind() string { return "bench_send" }

// InsertOpts puts the jobs on RawQueue.
func (SendArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: RawQueue} }

// SendWorker is what a user would write instead of the outbox: a River
// worker that makes the same client call as sendonce's worker, under the
// job's idempotency key, and records nothing but River's own completion.
type SendWorker struct {
	river.WorkerDefaults[SendArgs]
	Client *client.Client
}

// Work sends the job's email; an error leaves the retry to River.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	_, err := w.Client.Emails.Send(ctx, EmailParams(job.Args.To, job.Args.Order), client.WithIdempotencyKey(job.Args.Key))
	return err
}

// DrainRiverClient is the second baseline of DrainOutbox, what a user
// would write instead: p.N River jobs whose worker (SendWorker) calls the
// same client against the same fake API, with the same latency,
// MaxWorkers, FetchCooldown and pool size, and no outbox table. After a
// burn-down it checks that the fake delivered each email once.
func DrainRiverClient(ctx context.Context, env *Env, p DrainParams) (DrainResult, error) {
	fake, err := StartFake(p.Latency, p.Concurrency)
	if err != nil {
		return DrainResult{}, err
	}
	defer fake.Close()
	params := make([]river.InsertManyParams, p.N)
	for i := range params {
		params[i] = river.InsertManyParams{Args: SendArgs{Key: fmt.Sprintf("drain:%d", i), To: Recipient(i), Order: i}}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &SendWorker{Client: fake.Client})
	pool, err := env.freshPool(ctx)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	res, err := drainJobs(ctx, env, p, pool, params, workers)
	if err != nil || p.Window > 0 {
		return res, err
	}
	if delivered := len(fake.Server.Deliveries()); delivered != p.N {
		return res, fmt.Errorf("bench: %d jobs drained, but the fake delivered %d", p.N, delivered)
	}
	return res, nil
}

// drainJobs inserts jobs in one transaction with InsertManyFast (not
// timed) on pool, over tables the caller emptied (freshPool), then times a
// River client of workers on RawQueue, on pool, with the same MaxWorkers,
// FetchCooldown and pool size as the worker of DrainOutbox.
func drainJobs(ctx context.Context, env *Env, p DrainParams, pool *pgxpool.Pool, jobs []river.InsertManyParams, workers *river.Workers) (DrainResult, error) {
	if err := insertJobs(ctx, pool, jobs); err != nil {
		return DrainResult{}, err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}

	cooldown := p.FetchCooldown
	if cooldown <= 0 {
		cooldown = worker.DefaultFetchCooldown
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{RawQueue: {MaxWorkers: p.Concurrency}},
		Workers:       workers,
		FetchCooldown: cooldown,
		Logger:        discard,
	})
	if err != nil {
		return DrainResult{}, fmt.Errorf("bench: river client: %w", err)
	}
	events, unsubscribe := rc.SubscribeConfig(&river.SubscribeConfig{ChanSize: p.N + 1000, Kinds: finishedKinds})
	defer unsubscribe()
	return timeDrain(ctx, env, p, events, rc.Start, rc.Stop)
}

// freshPool empties the tables (Reset) and opens a pool of PoolConns for a
// drain of River jobs.
func (e *Env) freshPool(ctx context.Context) (*pgxpool.Pool, error) {
	if err := e.Reset(ctx); err != nil {
		return nil, err
	}
	return e.NewPool(ctx, e.PoolConns)
}

func insertJobs(ctx context.Context, pool *pgxpool.Pool, jobs []river.InsertManyParams) error {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return fmt.Errorf("bench: river client: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := rc.InsertManyFastTx(ctx, tx, jobs); err != nil {
			return fmt.Errorf("bench: insert jobs: %w", err)
		}
		return nil
	})
}
