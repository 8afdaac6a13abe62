package bench

import (
	"context"
	"fmt"
	"time"
)

// Drain is scenario 1: how fast a backlog of intents goes out through the
// full path, next to two baselines drained with the same settings in the
// same run. Raw River draining no-op jobs is the floor: the ratio to it is
// what the outbox's own work (a claim and a mark-sent per intent, the HTTP
// call and the fake's handling of it) costs on top of River. A River job
// making the same client call with no outbox ("River + client") is what a
// user would write instead: the ratio to it is what the outbox itself
// costs, its claim and mark-sent, in rate and in database CPU per intent.
type Drain struct {
	P         DrainParams
	row       *Row
	full, raw costs
	vsClient  *versusClient
	// suppressed is the full path's database CPU per intent with
	// Suppressed addresses on the suppression list, against the same
	// drain with the list empty.
	suppressed *Row
	// floors compare what one outbox write or two cost (Floors) with River
	// + client, in the same run.
	floors    []*floorRow
	runs      int
	poolConns int
	cpuFull   []CPU
	cpuRaw    []CPU
	cpuClient []CPU
}

// NewDrain returns scenario 1; quick drains fewer intents.
func NewDrain(quick bool) *Drain {
	p := DrainParams{N: 20_000, Concurrency: 500, FetchCooldown: 10 * time.Millisecond}
	if quick {
		p.N = 5_000
	}
	measure := fmt.Sprintf("%s intents, full path, concurrency %d, fetch cooldown %s, no added latency", Thousands(float64(p.N)), p.Concurrency, p.FetchCooldown)
	d := &Drain{P: p, full: newCosts("", "intent"), raw: newCosts("River no-op", "job")}
	d.row = &Row{
		Scenario:     "1. Drain",
		Measure:      measure,
		Unit:         PerSecond,
		Baseline:     "River no-op jobs",
		BaselineUnit: PerSecond,
		RatioUnit:    Times,
		Also:         append(d.full.figures(), d.raw.figures()...),
		Goal:         Goal{Text: "≥ 0.5× River", Check: RatioAtLeast(0.5)},
	}
	d.vsClient = newVersusClient("1. Drain", measure+", vs "+ClientBaseline)
	d.vsClient.row.Goal = Goal{
		Text:  "≥ 0.9× River + client; DB CPU/intent ≤ 1.3× River + client",
		Check: All(RatioAtLeast(0.9), d.vsClient.cpuRatio.AtMost(1.3)),
	}
	d.suppressed = &Row{
		Scenario:     "1. Drain",
		Measure:      fmt.Sprintf("%s, %s addresses on the suppression list (none a recipient): database CPU per intent", measure, Thousands(Suppressed)),
		Unit:         Micros,
		Baseline:     "the same with the list empty",
		BaselineUnit: Micros,
		RatioUnit:    Times,
		Goal:         Goal{Text: "≤ 1.2× the empty list's", Check: RatioAtMost(1.2)},
	}
	for _, f := range Floors {
		d.floors = append(d.floors, newFloorRow(f, fmt.Sprintf("%s jobs, concurrency %d, fetch cooldown %s", Thousands(float64(p.N)), p.Concurrency, p.FetchCooldown)))
	}
	return d
}

// Suppressed is how many addresses the drain's suppression row puts on
// the list.
const Suppressed = 10_000

// Name is "drain".
func (d *Drain) Name() string { return "drain" }

// Rows are the full path against River no-op jobs and against River +
// client, the suppression list's row, and the floors against River +
// client.
func (d *Drain) Rows() []*Row {
	rows := []*Row{d.row, d.vsClient.row, d.suppressed}
	for _, f := range d.floors {
		rows = append(rows, f.row)
	}
	return rows
}

// Run drains once through the outbox, once through raw River and once
// through River + client, in an order that rotates from run to run, then
// through the outbox again with a suppression list, then once for each
// floor.
func (d *Drain) Run(ctx context.Context, env *Env) error {
	var full, raw, cli, supp DrainResult
	drains := []struct {
		name  string
		res   *DrainResult
		drain func(context.Context, *Env, DrainParams) (DrainResult, error)
	}{{"full path", &full, DrainOutbox}, {"River no-op", &raw, DrainRiver}, {"River + client", &cli, DrainRiverClient}}
	d.poolConns = env.PoolConns
	for i := range drains {
		dr := drains[(i+d.runs)%len(drains)]
		counting := env.resetStatements(ctx)
		var err error
		if *dr.res, err = dr.drain(ctx, env, d.P); err != nil {
			return err
		}
		if counting {
			env.Logf("drain %s: per intent, %s", dr.name, env.topStatements(ctx, 15, float64(d.P.N)))
		}
	}
	d.runs++
	withList := d.P
	withList.Suppressed = Suppressed
	var err error
	if supp, err = DrainOutbox(ctx, env, withList); err != nil {
		return err
	}
	env.Logf("drain: full path with %d addresses on the suppression list %s", Suppressed, supp)
	for _, f := range d.floors {
		res, err := DrainFloor(ctx, env, d.P, f.floor)
		if err != nil {
			return err
		}
		env.Logf("drain: floor %q %s; %s", f.floor, res, f.log(res, cli))
	}
	d.suppressed.Value.Add(float64(supp.CPUPerJob().DB.Microseconds()))
	d.suppressed.BaselineValue.Add(float64(full.CPUPerJob().DB.Microseconds()))
	d.suppressed.Ratio.Add(float64(supp.CPUPerJob().DB) / float64(full.CPUPerJob().DB))
	rate, cpu := d.vsClient.add(full, cli)
	env.Logf("drain: full path %s, River no-op %s, River + client %s; %s", full, raw, cli, ratios(rate, cpu))
	d.cpuFull = append(d.cpuFull, full.CPUPerJob())
	d.cpuRaw = append(d.cpuRaw, raw.CPUPerJob())
	d.cpuClient = append(d.cpuClient, cli.CPUPerJob())
	d.full.add(full)
	d.raw.add(raw)
	d.row.Value.Add(full.Rate())
	d.row.BaselineValue.Add(raw.Rate())
	d.row.Ratio.Add(full.Rate() / raw.Rate())
	return nil
}

// Notes describe the measurement.
func (d *Drain) Notes() []string {
	return []string{fmt.Sprintf("**1. Drain.** %s intents are enqueued with EnqueueMany (batches of 1,000, not timed); "+
		"then a worker (`worker.New`, concurrency %d, fetch cooldown %s, a pool of %d connections) is started and timed "+
		"until its observer has been told of every send recorded: the worker's drain claims due intents in batches (no River "+
		"job per intent) → client → in-process fake API (no added latency) → outbox row marked sent. It has two baselines, each in the same run on the same database, one after "+
		"the other (the order rotates from run to run), with the same MaxWorkers, FetchCooldown and pool, their jobs inserted "+
		"with `InsertManyFastTx` on queue `%s`. *River no-op jobs*: raw River draining as many jobs of a trivial `river.Worker`, "+
		"River's own cost. *%s* (River + client): what a user would write instead, as many jobs of a `river.Worker` "+
		"whose Work calls the same client (`Emails.Send` with `WithIdempotencyKey`) against the same fake API and records "+
		"nothing else. The ratios are taken run by run. Each run checks that every row ended sent and the fake delivered "+
		"each intent once (for River + client, each email once).",
		Thousands(float64(d.P.N)), d.P.Concurrency, d.P.FetchCooldown, d.poolConns, RawQueue, ClientBaseline),
		"CPU per intent while draining (median of runs; this process is the worker, River, the client and the fake API; the " +
			"database is the backends serving the benchmark and the autovacuum workers in its database): full path " + medianCPU(d.cpuFull) + "; River no-op " + medianCPU(d.cpuRaw) +
			"; River + client " + medianCPU(d.cpuClient) + ". DB CPU/intent in the table is the database's part; WAL/intent is " +
			"the write-ahead log the server wrote while draining (`pg_wal_lsn_diff` of `pg_current_wal_lsn()` before and after), " +
			"over the intents drained: each drain starts right after a CHECKPOINT, so it includes the full-page images of the " +
			"first change to each page.",
		fmt.Sprintf("The suppression row drains as many intents again through the full path, with %s addresses put on the "+
			"suppression list first (none of them a recipient, so every intent is sent): with a list that is not empty, the first "+
			"claim of each intent looks its recipients up on it and stores what it found.", Thousands(Suppressed)),
		floorNote}
}
