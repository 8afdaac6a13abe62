package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/cmd/internal/ops/metrics"
	"github.com/sendonce/sendonce/cmd/internal/ops/outboxui"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// History measures the reads whose cost used to grow with the outbox's
// history (issue 26): a /metrics scrape, `sendonce status` (Stats) and the
// /outbox/ page over a table of N sent rows, for each N of Sizes; then, at
// the largest N, one call of Reconcile against a pending run of RunSize
// members and a Prune of the sent rows while that run is pending. History
// is loaded with plain INSERT … SELECT generate_series, not through
// Enqueue, so that 3M rows load in a minute.
type History struct {
	Sizes   []int
	RunSize int
	reads   map[int][3]*Row
	rows    []*Row
	recon   *Row
	prune   *Row
	drain   *Row // a drain while the prune runs, against one before it
	// backlog0 and backlog are the steady database CPU per intent of a
	// drain from a pending backlog (backlogDrain): from a run of
	// backlogDrain.N members before any history is loaded, and from the
	// run's RunSize members beside the largest history.
	backlog0, backlog *Row
}

// NewHistory makes the scenario; quick uses small sizes. sizes, when not
// empty, overrides them.
func NewHistory(quick bool, sizes []int) *History {
	h := &History{Sizes: []int{10_000, 3_000_000}, RunSize: 1_000_000, reads: map[int][3]*Row{}}
	if quick {
		h.Sizes, h.RunSize = []int{1_000, 10_000}, 10_000
	}
	if len(sizes) > 0 {
		h.Sizes = sizes
		h.RunSize = min(sizes[len(sizes)-1], 1_000_000)
	}
	for _, n := range h.Sizes {
		var rs [3]*Row
		for i, what := range []string{"/metrics scrape", "`sendonce status` (Stats)", "/outbox/ page"} {
			rs[i] = &Row{Scenario: "10. History", Measure: fmt.Sprintf("%s with %s sent rows (median of 5)", what, Thousands(float64(n))), Unit: Millis,
				Also: []*Figure{{Name: "DB CPU", Unit: Millis}, {Name: "WAL", Unit: Bytes}}}
			if i == 0 {
				rs[i].Goal = Goal{Text: "< 100 ms", Check: Below(100)}
			}
			h.rows = append(h.rows, rs[i])
		}
		h.reads[n] = rs
	}
	// The largest history's reads are held to the smallest's: a read
	// that grows with the table shows as a ratio, whatever the machine.
	if small, large := h.Sizes[0], h.Sizes[len(h.Sizes)-1]; large > small {
		for i, r := range h.reads[large] {
			r.Baseline = "the same with " + Thousands(float64(small))
			r.BaselineUnit, r.RatioUnit = Millis, Times
			goal := Goal{Text: "≤ 1.2× with " + Thousands(float64(small)), Check: RatioAtMost(1.2)}
			if i == 0 {
				goal = Goal{Text: "< 100 ms, " + goal.Text, Check: All(Below(100), goal.Check)}
			}
			r.Goal = goal
		}
	}
	h.recon = &Row{Scenario: "10. History", Measure: fmt.Sprintf("one Reconcile call against a run of %s pending members (it reads %s of them; the sweeper calls it every 3 s)",
		Thousands(float64(h.RunSize)), Thousands(float64(min(h.RunSize, sendstate.DefaultReconcileBudget)))), Unit: Millis,
		Also: []*Figure{{Name: "DB CPU", Unit: Millis}, {Name: "WAL", Unit: Bytes}}}
	longest := &Figure{Name: "longest transaction", Unit: Millis}
	h.prune = &Row{Scenario: "10. History", Measure: fmt.Sprintf("Prune of %s sent rows (the older half of the history) while a %s-member run is pending",
		Thousands(float64(h.Sizes[len(h.Sizes)-1]/2)), Thousands(float64(h.RunSize))), Unit: PerSecond,
		Goal: Goal{Text: "≥ 20,000/s, no transaction over 1 s", Check: All(AtLeast(20_000), longest.AtMost(1000))},
		Also: []*Figure{{Name: "DB CPU/row", Unit: Micros}, {Name: "WAL/row", Unit: Bytes}, {Name: "mean transaction", Unit: Millis}, longest}}
	h.drain = &Row{Scenario: "10. History", Measure: fmt.Sprintf("drain beside the %s-member run while the rest of the history is pruned (worker --concurrency %d, %s of steady rate after %s)",
		Thousands(float64(h.RunSize)), historyDrain.Concurrency, historyDrain.Window, historyDrain.Warmup), Unit: PerSecond,
		Baseline: "the same drain before the prune", BaselineUnit: PerSecond, RatioUnit: Times,
		Goal: Goal{Text: "≥ 0.9× the drain without the prune", Check: RatioAtLeast(0.9)},
		Also: []*Figure{{Name: "DB CPU/intent, the prune's included", Unit: Micros}, {Name: "WAL/intent, the prune's included", Unit: Bytes}, {Name: "that prune", Unit: PerSecond}}}
	h.backlog0 = &Row{Scenario: "10. History", Measure: fmt.Sprintf("drain from a pending backlog of %s, no history: database CPU per intent (worker --concurrency %d, %s of steady rate after %s)",
		Thousands(float64(backlogDrain.N)), backlogDrain.Concurrency, backlogDrain.Window, backlogDrain.Warmup), Unit: Micros,
		Also: []*Figure{{Name: "rate", Unit: PerSecond}, {Name: "WAL/intent", Unit: Bytes}}}
	h.backlog = &Row{Scenario: "10. History", Measure: fmt.Sprintf("drain from a pending backlog of %s (the run), beside %s sent rows: database CPU per intent (worker --concurrency %d, %s of steady rate after %s)",
		Thousands(float64(h.RunSize)), Thousands(float64(h.Sizes[len(h.Sizes)-1])), backlogDrain.Concurrency, backlogDrain.Window, backlogDrain.Warmup), Unit: Micros,
		Baseline: "the same from a backlog of " + Thousands(float64(backlogDrain.N)), BaselineUnit: Micros, RatioUnit: Times,
		Goal: Goal{Text: "≤ 1.2× the small backlog's", Check: RatioAtMost(1.2)},
		Also: []*Figure{{Name: "rate", Unit: PerSecond}, {Name: "WAL/intent", Unit: Bytes}}}
	h.rows = append(h.rows, h.recon, h.backlog0, h.backlog, h.prune, h.drain)
	return h
}

// Name implements Scenario.
func (h *History) Name() string { return "history" }

// Rows implements Scenario.
func (h *History) Rows() []*Row { return h.rows }

// Notes implements Scenario.
func (h *History) Notes() []string {
	return []string{"History (10): the sent rows are loaded by one INSERT … SELECT generate_series (the older half created and settled two days ago, the rest a day ago; all sent in the last hour), " +
		"ANALYZEd and CHECKPOINTed before the reads; each read is timed five times after one warm-up, the median shown, with the database's CPU and WAL of the five. " +
		"The /metrics scrape is the worker's registry (outbox, runs and budget collectors) served by its handler; the page is the outbox UI's overview. " +
		"The run's members are pending with live (available) River jobs, loaded like the history, so Reconcile finds nothing to give and what is timed is its reading. " +
		"The backlog rows time a worker's steady rate (5 s after a warm-up of 3 s that holds its start; its sweeper reconciles 5,000 of the backlog every 3 s, in the window too) from a backlog of 20,000 pending intents " +
		"(loaded like the run, then VACUUM ANALYZEd as autovacuum leaves a bulk insert) before any history is loaded, and from the run's pending members beside the largest history; the figure is the database's CPU per intent. " +
		"Half the history was settled two days ago, half a day ago: the first half is pruned alone (the prune row: its rate, the database's CPU and WAL per row, " +
		"its mean transaction, and the longest any of its transactions was seen open by a sampler every 20 ms of pg_locks for Prune's advisory lock, " +
		"which each of its transactions holds); then a drain of new intents (a sendonce worker, --concurrency 100, the in-process fake API) is timed beside the history and the run, " +
		"and timed again while the second half is pruned (the prune starts as the drain's measured window does; it rests between its transactions while intents are being sent): the drain row is its steady rate then against before, with that second prune's rate beside it."}
}

// backlogDrain is the drain from a pending backlog: its steady rate over
// a window, after a warm-up that holds the worker's start. Its sweeper
// reconciles one window of the backlog every 3 s (the reconcile row), so
// the measured window holds one or two calls whatever the backlog. The
// small backlog is N intents, more than the window drains.
var backlogDrain = DrainParams{N: 20_000, Concurrency: 100, Warmup: 3 * time.Second, Window: 5 * time.Second, Timeout: 2 * time.Minute}

// historyDrain is the drain timed before the prune and again while it
// runs: its steady rate over a window, so that it ends within the prune.
var historyDrain = DrainParams{N: 40_000, Concurrency: 100, Warmup: 2 * time.Second, Window: 6 * time.Second, Timeout: 2 * time.Minute}

const historyPayload = `'{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}'`

// Run implements Scenario.
func (h *History) Run(ctx context.Context, env *Env) error {
	pool, ob, err := env.NewOutbox(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	ui, err := outboxui.New(pool, ob, outboxui.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	m := metrics.New()
	m.WatchOutbox(ob, 0, nil)
	m.WatchRuns(ob, 0, nil)
	m.WatchBudget(pool, 0, nil)
	scrape := m.Handler()
	if err := env.Reset(ctx); err != nil {
		return err
	}
	// Half the history belongs to a finished run, so that prune asks
	// whether that run is busy for those rows.
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('hist-run') ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	if err := h.smallBacklog(ctx, env); err != nil {
		return err
	}
	loaded := 0
	for _, n := range h.Sizes {
		env.Logf("history: load %d sent rows", n)
		if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload, state, attempts, message_id, checked,
				first_attempt_at, sent_at, created_at, updated_at, run_key)
			SELECT 'h:' || g, `+historyPayload+`, 'sent', 1, 'm' || g, true,
				now() - interval '1 day', now() - (g % 3600) * interval '1 second',
				now() - CASE WHEN g <= $3 THEN interval '2 days' ELSE interval '1 day' END,
				now() - CASE WHEN g <= $3 THEN interval '2 days' ELSE interval '1 day' END,
				CASE WHEN g % 2 = 0 THEN 'hist-run' END
			FROM generate_series($1::bigint + 1, $2::bigint) g`, loaded, n, h.Sizes[len(h.Sizes)-1]/2); err != nil {
			return fmt.Errorf("history: load: %w", err)
		}
		loaded = n
		if _, err := env.Admin.Exec(ctx, `ANALYZE sendonce_outbox`); err != nil {
			return err
		}
		if _, err := env.Admin.Exec(ctx, `SELECT sendonce_tally_compact()`); err != nil && !isUndefined(err) {
			return err
		}
		if err := env.Checkpoint(ctx); err != nil {
			return err
		}
		reads := []func() error{
			func() error { return serve(scrape, "/metrics") },
			func() error { _, err := ob.Stats(ctx); return err },
			func() error { return serve(ui, outboxui.Prefix+"/") },
		}
		for i, read := range reads {
			pgss := env.resetStatements(ctx)
			ms, cpu, wal, err := timed(ctx, env, 5, read)
			if err != nil {
				return fmt.Errorf("history: %s: %w", h.reads[n][i].Measure, err)
			}
			r := h.reads[n][i]
			if pgss {
				// Six calls: the warm-up and the five timed.
				env.Logf("history: %s: per call, %s", r.Measure, env.topStatements(ctx, 12, 6))
			}
			r.Value.Add(ms)
			r.Also[0].Value.Add(cpu)
			r.Also[1].Value.Add(wal)
			if r.Baseline != "" {
				// The smallest history was loaded and read first, in this
				// run: its last figure is this run's.
				small := h.reads[h.Sizes[0]][i].Value
				r.BaselineValue.Add(small[len(small)-1])
				r.Ratio.Add(ms / small[len(small)-1])
			}
		}
	}
	return h.runAndPrune(ctx, env, pool, loaded)
}

// runAndPrune is the scenario's second half: a run of RunSize pending
// members beside the history, reconciled and drained, then the history
// pruned alone and beside a drain.
func (h *History) runAndPrune(ctx context.Context, env *Env, pool *pgxpool.Pool, sent int) error {
	if err := h.loadRun(ctx, env, pool); err != nil {
		return err
	}
	fake, err := StartFake(0, max(historyDrain.Concurrency, backlogDrain.Concurrency))
	if err != nil {
		return err
	}
	defer fake.Close()
	drainPool, drainOb, err := env.NewOutbox(ctx, env.PoolConns)
	if err != nil {
		return err
	}
	defer drainPool.Close()
	env.Logf("history: drain from the run's %d pending members", h.RunSize)
	if err := h.drainBacklog(ctx, env, drainPool, fake, h.backlog); err != nil {
		return err
	}
	h.backlog.BaselineValue.Add(h.backlog0.Value.Median())
	h.backlog.Ratio.Add(h.backlog.Value.Median() / h.backlog0.Value.Median())

	// The older half of the history (created and settled two days ago,
	// the lower ids: Prune reads the ids created before its cutoff) is
	// pruned alone, for the prune's own rate and costs; the rest (a day ago)
	// while a drain runs beside it, for the drain's rate against the
	// same drain before.
	env.Logf("history: prune the older half of the %d sent rows while the run is pending", sent)
	alone, err := h.pruneAlone(ctx, env, pool)
	if err != nil {
		return err
	}
	second, err := h.pruneBesideDrain(ctx, env, pool, drainPool, drainOb, fake)
	if err != nil {
		return err
	}
	if n := alone.res.Intents + second.res.Intents; n != sent && !alone.cutOff && !second.cutOff {
		return fmt.Errorf("history: the prunes deleted %d intents, want the %d sent", n, sent)
	}
	return nil
}

// loadRun loads the run's pending members and times one reconcile of
// them, which must give no intent a new job.
func (h *History) loadRun(ctx context.Context, env *Env, pool *pgxpool.Pool) error {
	env.Logf("history: a run of %d pending members", h.RunSize)
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('bench-run') ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	// loadBacklog leaves the tables VACUUMed, ANALYZEd and checkpointed.
	if err := loadBacklog(ctx, env, "r:", "bench-run", h.RunSize, 0); err != nil {
		return err
	}
	s := &sendstate.Scheduler{Pool: pool, Queue: outbox.DefaultQueue}
	ms, cpu, wal, err := timed(ctx, env, 1, func() error {
		n, err := s.Reconcile(ctx)
		if err == nil && n != 0 {
			err = fmt.Errorf("reconcile gave %d intents new jobs, want 0", n)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("history: reconcile: %w", err)
	}
	h.recon.Value.Add(ms)
	h.recon.Also[0].Value.Add(cpu)
	h.recon.Also[1].Value.Add(wal)
	return nil
}

// pruneAlone prunes the history's older half with nothing beside it and
// records the prune row.
func (h *History) pruneAlone(ctx context.Context, env *Env, pool *pgxpool.Pool) (prunedRun, error) {
	alone, err := timePrune(ctx, env, pool, 36*time.Hour)
	if err != nil {
		return alone, err
	}
	h.prune.Value.Add(alone.rate())
	h.prune.Also[0].Value.Add(float64(alone.cpu.DB.Microseconds()) / float64(max(alone.res.Intents, 1)))
	h.prune.Also[1].Value.Add(float64(alone.wal) / float64(max(alone.res.Intents, 1)))
	rounds := (alone.res.Intents + sendstate.DefaultPruneBatch - 1) / sendstate.DefaultPruneBatch
	h.prune.Also[2].Value.Add(float64(alone.el.Milliseconds()) / float64(max(rounds, 1)))
	h.prune.Also[3].Value.Add(float64(alone.longest.Milliseconds()))
	return alone, nil
}

// pruneBesideDrain times a drain beside the run before any of the rest is
// pruned, then again while the rest is pruned, and records the drain row.
func (h *History) pruneBesideDrain(ctx context.Context, env *Env, pool, drainPool *pgxpool.Pool, drainOb *outbox.Outbox, fake *Fake) (prunedRun, error) {
	before, err := h.drainBeside(ctx, env, drainPool, drainOb, fake, "hd1")
	if err != nil {
		return prunedRun{}, fmt.Errorf("history: drain before the prune: %w", err)
	}
	env.Logf("history: drain beside the run, before the prune: %s", before)
	if err := EnqueueBatches(ctx, drainPool, drainOb, Intents("hd2", historyDrain.N), 1000); err != nil {
		return prunedRun{}, err
	}
	env.Logf("history: prune the rest while the run is pending, with a drain beside them")
	type pruned struct {
		p   prunedRun
		err error
	}
	done := make(chan pruned, 1)
	go func() {
		// The prune starts as the drain's measured window does, so that
		// the window is spent beside it, not in the drain's warm-up.
		select {
		case <-time.After(historyDrain.Warmup):
		case <-ctx.Done():
			done <- pruned{err: ctx.Err()}
			return
		}
		p, err := timePrune(ctx, env, pool, time.Hour)
		done <- pruned{p, err}
	}()
	during, drainErr := drainQueued(ctx, env, drainPool, fake, historyDrain)
	second := <-done
	if second.err != nil {
		return second.p, second.err
	}
	if drainErr != nil {
		return second.p, fmt.Errorf("history: drain during the prune: %w", drainErr)
	}
	env.Logf("history: drain during the prune: %s; that prune: %s/s in %s, rested %s", during, Thousands(second.p.rate()), second.p.el.Round(time.Millisecond), second.p.res.Rested.Round(time.Millisecond))
	if second.p.el < historyDrain.Window {
		env.Logf("history: the prune ended before the drain's window did: the drain's figure is partly without it")
	}
	h.drain.Value.Add(during.Rate())
	h.drain.BaselineValue.Add(before.Rate())
	h.drain.Ratio.Add(during.Rate() / before.Rate())
	h.drain.Also[0].Value.Add(float64(during.CPUPerJob().DB.Microseconds()))
	h.drain.Also[1].Value.Add(during.WALPerJob())
	h.drain.Also[2].Value.Add(second.p.rate())
	return second.p, nil
}

// prunedRun is what timePrune measured.
type prunedRun struct {
	res    sendstate.PruneResult
	el     time.Duration
	cpu    CPU
	wal    int64
	cutOff bool // stopped at two minutes
	// longest is the longest a transaction of the prune was seen open,
	// sampled every 20 ms.
	longest time.Duration
}

func (p prunedRun) rate() float64 { return float64(p.res.Intents) / p.el.Seconds() }

// timePrune times one Prune of the intents settled more than retain ago.
// At most two minutes: a prune that fights the run (10 rows/s before issue
// 26) is measured on what it did by then.
func timePrune(ctx context.Context, env *Env, pool *pgxpool.Pool, retain time.Duration) (prunedRun, error) {
	w0, err := env.ReadWAL(ctx)
	if err != nil {
		return prunedRun{}, err
	}
	c0 := env.ReadCPU()
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	sampled := make(chan time.Duration, 1)
	go func() { sampled <- longestPrune(pctx, env) }()
	res, err := sendstate.Prune(pctx, pool, sendstate.PruneOptions{Retain: retain})
	p := prunedRun{res: res, el: time.Since(start), cpu: env.ReadCPU().Sub(c0), cutOff: pctx.Err() != nil && ctx.Err() == nil}
	cancel()
	p.longest = <-sampled
	if err != nil && !p.cutOff {
		return p, fmt.Errorf("history: prune: %w", err)
	}
	if p.cutOff {
		env.Logf("history: prune cut off after %s with %d rows deleted", p.el.Round(time.Second), res.Intents)
	}
	p.wal, err = env.WALSince(ctx, w0)
	return p, err
}

// longestPrune samples, every 20 ms until ctx ends, how long the
// transaction holding Prune's advisory lock (each of its transactions
// takes it first) has been open, and returns the longest seen.
func longestPrune(ctx context.Context, env *Env) time.Duration {
	var longest time.Duration
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return longest
		case <-tick.C:
		}
		var ms float64
		err := env.Admin.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - a.xact_start) * 1000), 0)
			FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
				AND (l.classid::int8 << 32 | l.objid::int8) = $1`, sendstate.PruneLockKey).Scan(&ms)
		if err == nil {
			longest = max(longest, time.Duration(ms*float64(time.Millisecond)))
		}
	}
}

// smallBacklog times the drain of a backlog of backlogDrain.N before any
// history is loaded: the figure the run's backlog is held to. Its rows
// are older than the history's (three days), the order of their ids.
func (h *History) smallBacklog(ctx context.Context, env *Env) error {
	env.Logf("history: drain a backlog of %d", backlogDrain.N)
	if err := loadBacklog(ctx, env, "b:", "small-run", backlogDrain.N, 72*time.Hour); err != nil {
		return err
	}
	fake, err := StartFake(0, backlogDrain.Concurrency)
	if err != nil {
		return err
	}
	defer fake.Close()
	pool, err := env.NewPool(ctx, env.PoolConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	return h.drainBacklog(ctx, env, pool, fake, h.backlog0)
}

// loadBacklog inserts n pending intents of run (none: ""), keys prefix + a
// number, as Enqueue writes them (no River job, checked), by plain
// INSERT … SELECT: a backlog of 1M loads in seconds, where Enqueue would
// take minutes.
//
// created is how long ago the rows were created: Prune reads the ids
// created before its cutoff, so ids must grow with created_at, as they do
// in production.
func loadBacklog(ctx context.Context, env *Env, prefix, run string, n int, created time.Duration) error {
	if run != "" {
		if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ($1) ON CONFLICT DO NOTHING`, run); err != nil {
			return err
		}
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload, run_key, checked, created_at, updated_at)
		SELECT $1 || g, `+historyPayload+`, nullif($2, ''), true, now() - $3::float8 * interval '1 second', now() - $3::float8 * interval '1 second'
		FROM generate_series(1, $4::bigint) g`, prefix, run, created.Seconds(), n); err != nil {
		return fmt.Errorf("history: load a backlog: %w", err)
	}
	// As autovacuum leaves a bulk insert (the outbox's insert threshold is
	// 1% of its rows): its hint bits and visibility map set, so that what
	// the drain pays is its own work, whichever rows something read first.
	if _, err := env.Admin.Exec(ctx, `VACUUM ANALYZE sendonce_outbox`); err != nil {
		return err
	}
	return env.Checkpoint(ctx)
}

// drainBacklog times backlogDrain's steady window (after its warm-up) of
// a drain from the backlog queued, into row: database CPU per intent, rate
// and WAL.
func (h *History) drainBacklog(ctx context.Context, env *Env, pool *pgxpool.Pool, fake *Fake, row *Row) error {
	pgss := env.resetStatements(ctx)
	res, err := drainQueued(ctx, env, pool, fake, backlogDrain)
	if err != nil {
		return fmt.Errorf("history: drain from a backlog: %w", err)
	}
	env.Logf("history: %s: %s", row.Measure, res)
	if pgss {
		env.Logf("history: per intent, %s", env.topStatements(ctx, 12, float64(res.N)))
	}
	row.Value.Add(float64(res.CPUPerJob().DB.Microseconds()))
	row.Also[0].Value.Add(res.Rate())
	row.Also[1].Value.Add(res.WALPerJob())
	return nil
}

// drainBeside enqueues historyDrain.N intents (keys from prefix) beside
// the history and the run, and times historyDrain over them.
func (h *History) drainBeside(ctx context.Context, env *Env, pool *pgxpool.Pool, ob *outbox.Outbox, fake *Fake, prefix string) (DrainResult, error) {
	if err := EnqueueBatches(ctx, pool, ob, Intents(prefix, historyDrain.N), 1000); err != nil {
		return DrainResult{}, err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}
	return drainQueued(ctx, env, pool, fake, historyDrain)
}

// timed runs fn once to warm up, then times runs of it, and returns the
// median milliseconds, the database's CPU (ms) and WAL (bytes) per run.
func timed(ctx context.Context, env *Env, runs int, fn func() error) (ms, cpu, wal float64, err error) {
	if err := fn(); err != nil {
		return 0, 0, 0, err
	}
	w0, err := env.ReadWAL(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	c0 := env.ReadCPU()
	var s Samples
	for range runs {
		t := time.Now()
		if err := fn(); err != nil {
			return 0, 0, 0, err
		}
		s.Add(float64(time.Since(t).Microseconds()) / 1000)
	}
	c := env.ReadCPU().Sub(c0)
	w, err := env.WALSince(ctx, w0)
	if err != nil {
		return 0, 0, 0, err
	}
	return s.Median(), float64(c.DB.Microseconds()) / 1000 / float64(runs), float64(w) / float64(runs), nil
}

// isUndefined reports whether err is PostgreSQL's "undefined function"
// (a schema before migration 00022 has no tally to compact).
func isUndefined(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42883"
}

// serve runs one GET of path against h and checks it answered 200.
func serve(h http.Handler, path string) error {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return nil
}
