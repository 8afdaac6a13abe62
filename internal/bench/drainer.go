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
}

// DrainResult is what one drain measured.
type DrainResult struct {
	// N is how many jobs completed in the measured time.
	N int
	// Elapsed is the measured time.
	Elapsed time.Duration
	// CPU is the processor time spent in the measured time.
	CPU CPU
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

// finishedKinds are the River events that end a job's run; only
// completions are expected, and any other end is an error.
var finishedKinds = []river.EventKind{
	river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed,
}

// DrainOutbox enqueues p.N intents, then starts a sendonce worker against
// a fake API and times it: the full path of River job → worker → client →
// fake API → outbox row marked sent → job completed. After a burn-down it
// checks that every row is sent and that the fake delivered each intent
// once.
func DrainOutbox(ctx context.Context, env *Env, p DrainParams) (DrainResult, error) {
	if err := env.Reset(ctx); err != nil {
		return DrainResult{}, err
	}
	fake, err := StartFake(p.Latency, p.Concurrency)
	if err != nil {
		return DrainResult{}, err
	}
	defer fake.Close()
	pool, err := env.NewPool(ctx, env.PoolConns)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	ob, err := env.Outbox(pool)
	if err != nil {
		return DrainResult{}, err
	}
	if err := EnqueueBatches(ctx, ob, Intents("drain", p.N), 1000); err != nil {
		return DrainResult{}, err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}

	w, err := worker.New(pool, &worker.Config{
		Client:        fake.Client,
		Concurrency:   p.Concurrency,
		FetchCooldown: p.FetchCooldown,
		Logger:        discard,
	})
	if err != nil {
		return DrainResult{}, err
	}
	events, unsubscribe := w.RiverClient().SubscribeConfig(&river.SubscribeConfig{ChanSize: p.N + 1000, Kinds: finishedKinds})
	defer unsubscribe()
	res, err := timeDrain(ctx, env, p, events, w.Start, w.Stop)
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
			cpu0, t0, done0, measuring = env.ReadCPU(), time.Now(), done, true
		case <-windowEnd:
			break loop
		case <-runCtx.Done():
			waitErr = fmt.Errorf("bench: %d of %d jobs completed before the timeout: %w", done, p.N, runCtx.Err())
			break loop
		}
	}
	res := DrainResult{N: done - done0, Elapsed: time.Since(t0), CPU: env.ReadCPU().Sub(cpu0)}
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

// RawQueue is the River queue of the raw baseline's no-op jobs, apart from
// the outbox's queue.
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
	if err := env.Reset(ctx); err != nil {
		return DrainResult{}, err
	}
	pool, err := env.NewPool(ctx, env.PoolConns)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	if err := insertNoops(ctx, pool, p.N); err != nil {
		return DrainResult{}, err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}

	cooldown := p.FetchCooldown
	if cooldown <= 0 {
		cooldown = worker.DefaultFetchCooldown
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, NoopWorker{})
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

func insertNoops(ctx context.Context, pool *pgxpool.Pool, n int) error {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return fmt.Errorf("bench: river client: %w", err)
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: NoopArgs{}}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := rc.InsertManyFastTx(ctx, tx, params); err != nil {
			return fmt.Errorf("bench: insert no-op jobs: %w", err)
		}
		return nil
	})
}
