package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/worker"
)

// Idle is scenario 9: what a started worker with nothing to do costs the
// database each second (its drain's look for due intents, its lease's
// renewals, the fleet's sweeps), next to a started River client with
// nothing to do (its fetch polls, its leader's maintenance), both with
// their defaults, one after the other in an order that turns from run to
// run. The outbox lives in the application's database: an idle worker's
// cost is taken from the application every second it runs.
type Idle struct {
	row  *Row
	runs int
}

// Idle timings: each measures idleWindow after idleSettle.
const (
	idleSettle = 5 * time.Second
	idleWindow = 20 * time.Second
)

// NewIdle returns scenario 9.
func NewIdle() *Idle {
	return &Idle{row: &Row{
		Scenario:     "9. Idle",
		Measure:      fmt.Sprintf("database CPU per second of a started worker with nothing to do (`worker.New` defaults), %s after %s", idleWindow, idleSettle),
		Unit:         Micros,
		Baseline:     "a started River client with nothing to do (defaults, one queue)",
		BaselineUnit: Micros,
		RatioUnit:    Times,
		Goal:         Goal{Text: "≤ 1.0× River's", Check: RatioAtMost(1.0)},
	}}
}

// Name is "idle".
func (s *Idle) Name() string { return "idle" }

// Rows is the one row.
func (s *Idle) Rows() []*Row { return []*Row{s.row} }

// Run measures the worker and the River client once each.
func (s *Idle) Run(ctx context.Context, env *Env) error {
	if err := env.Reset(ctx); err != nil {
		return err
	}
	fake, err := StartFake(0, 10)
	if err != nil {
		return err
	}
	defer fake.Close()
	measure := []func() (float64, error){
		func() (float64, error) {
			pool, err := env.NewPool(ctx, env.PoolConns)
			if err != nil {
				return 0, err
			}
			defer pool.Close()
			w, err := worker.New(pool, &worker.Config{Client: fake.Client, Logger: discard})
			if err != nil {
				return 0, err
			}
			return idleCPU(ctx, env, w.Start, w.Stop)
		},
		func() (float64, error) {
			pool, err := env.NewPool(ctx, env.PoolConns)
			if err != nil {
				return 0, err
			}
			defer pool.Close()
			workers := river.NewWorkers()
			river.AddWorker(workers, NoopWorker{})
			rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
				Queues:  map[string]river.QueueConfig{RawQueue: {MaxWorkers: worker.DefaultConcurrency}},
				Workers: workers,
				Logger:  discard,
			})
			if err != nil {
				return 0, err
			}
			return idleCPU(ctx, env, rc.Start, rc.Stop)
		},
	}
	got := make([]float64, len(measure))
	for i := range measure {
		k := (i + s.runs) % len(measure)
		if got[k], err = measure[k](); err != nil {
			return err
		}
	}
	s.runs++
	env.Logf("idle: database CPU per second: worker %.0f µs, River client %.0f µs (%.2f×)", got[0], got[1], got[0]/got[1])
	s.row.Value.Add(got[0])
	s.row.BaselineValue.Add(got[1])
	s.row.Ratio.Add(got[0] / got[1])
	return nil
}

// idleCPU starts what start starts, lets it settle, and returns the
// database's CPU per second (µs) over the window, then stops it.
func idleCPU(ctx context.Context, env *Env, start, stop func(context.Context) error) (float64, error) {
	if err := start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = stop(stopCtx)
	}()
	if err := sleepCtx(ctx, idleSettle); err != nil {
		return 0, err
	}
	cpu0, t0 := env.ReadCPU(), time.Now()
	if err := sleepCtx(ctx, idleWindow); err != nil {
		return 0, err
	}
	cpu, elapsed := env.ReadCPU().Sub(cpu0), time.Since(t0)
	if cpu.DB == 0 {
		return 0, errors.New("bench: idle: the database's backends are not readable here")
	}
	return float64(cpu.DB.Microseconds()) / elapsed.Seconds(), nil
}

// Notes describe the measurement.
func (s *Idle) Notes() []string {
	return []string{fmt.Sprintf("**9. Idle.** A worker (`worker.New` with its defaults: concurrency %d, sweep interval %s, "+
		"lease %s) is started on an empty outbox and left alone for %s; then the database's CPU (its backends and "+
		"autovacuum, as in scenario 1) is read over %s, and the worker stopped. The baseline is a River client with its "+
		"defaults and one queue (a no-op worker, MaxWorkers %d), started and measured the same way; the two take turns "+
		"from run to run. An idle worker's drain holds no token and looks for due intents at a notification, "+
		"at the next due time it knows of, and every 30 sweep intervals; the rest is its lease's renewal every "+
		"second, its River client's poll (every 10 s) and leader's maintenance, and the fleet's duties when "+
		"something calls for them or on their nets (10 to 60 s).",
		worker.DefaultConcurrency, worker.DefaultSweepInterval, worker.DefaultLease, idleSettle, idleWindow, worker.DefaultConcurrency)}
}
