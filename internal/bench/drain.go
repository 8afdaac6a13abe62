package bench

import (
	"context"
	"fmt"
	"time"
)

// Drain is scenario 1: how fast a backlog of intents goes out through the
// full path, next to raw River draining as many no-op jobs with the same
// settings in the same run. The ratio is what the outbox's own work (a
// claim and a mark-sent per intent, the HTTP call and the fake's handling
// of it) costs on top of River.
type Drain struct {
	P         DrainParams
	row       *Row
	runs      int
	poolConns int
	cpuFull   []CPU
	cpuRaw    []CPU
}

// NewDrain returns scenario 1; quick drains fewer intents.
func NewDrain(quick bool) *Drain {
	p := DrainParams{N: 20_000, Concurrency: 500, FetchCooldown: 10 * time.Millisecond}
	if quick {
		p.N = 5_000
	}
	return &Drain{P: p, row: &Row{
		Scenario:     "1. Drain",
		Measure:      fmt.Sprintf("%s intents, full path, concurrency %d, fetch cooldown %s, no added latency", Thousands(float64(p.N)), p.Concurrency, p.FetchCooldown),
		Unit:         PerSecond,
		Baseline:     "River no-op jobs",
		BaselineUnit: PerSecond,
		RatioUnit:    Times,
		Goal:         Goal{Text: "≥ 0.5× River", Check: RatioAtLeast(0.5)},
	}}
}

// Name is "drain".
func (d *Drain) Name() string { return "drain" }

// Rows is the one row of the scenario.
func (d *Drain) Rows() []*Row { return []*Row{d.row} }

// Run drains once through the outbox and once through raw River, in
// alternating order from run to run.
func (d *Drain) Run(ctx context.Context, env *Env) error {
	var full, raw DrainResult
	var err error
	first, second := &full, &raw
	firstFn, secondFn := DrainOutbox, DrainRiver
	if d.runs%2 == 1 {
		first, second = second, first
		firstFn, secondFn = secondFn, firstFn
	}
	d.runs++
	d.poolConns = env.PoolConns
	if *first, err = firstFn(ctx, env, d.P); err != nil {
		return err
	}
	if *second, err = secondFn(ctx, env, d.P); err != nil {
		return err
	}
	fc, rc := full.CPUPerJob(), raw.CPUPerJob()
	env.Logf("drain: full path %s/s (%s; CPU per intent: process %s, database %s), River %s/s (%s; CPU per job: process %s, database %s)",
		Thousands(full.Rate()), full.Elapsed.Round(time.Millisecond), fc.Self.Round(time.Microsecond), fc.DB.Round(time.Microsecond),
		Thousands(raw.Rate()), raw.Elapsed.Round(time.Millisecond), rc.Self.Round(time.Microsecond), rc.DB.Round(time.Microsecond))
	d.cpuFull = append(d.cpuFull, fc)
	d.cpuRaw = append(d.cpuRaw, rc)
	d.row.Value.Add(full.Rate())
	d.row.BaselineValue.Add(raw.Rate())
	d.row.Ratio.Add(full.Rate() / raw.Rate())
	return nil
}

// Notes describe the measurement.
func (d *Drain) Notes() []string {
	return []string{fmt.Sprintf("**1. Drain.** %s intents are enqueued with EnqueueMany (batches of 1,000, not timed); "+
		"then a worker (`worker.New`, concurrency %d, fetch cooldown %s, a pool of %d connections) is started and timed "+
		"until River reports every send job completed: River job → worker → client → in-process fake API (no added latency) → "+
		"outbox row marked sent → job completed. The baseline, in the same run on the same database, is raw River "+
		"draining as many no-op jobs (a trivial `river.Worker` on queue `%s`, inserted with `InsertManyFastTx`) with the same "+
		"MaxWorkers, FetchCooldown and pool. The ratio is taken run by run. Each run checks that every row ended sent and the fake "+
		"delivered each intent once.", Thousands(float64(d.P.N)), d.P.Concurrency, d.P.FetchCooldown, d.poolConns, RawQueue),
		"CPU per intent while draining (median of runs; this process is the worker, River, the client and the fake API; the " +
			"database is the backends serving the benchmark): full path " + medianCPU(d.cpuFull) + "; River no-op " + medianCPU(d.cpuRaw) + "."}
}
