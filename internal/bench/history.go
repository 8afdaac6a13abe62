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

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/ops/metrics"
	"github.com/sendonce/sendonce/internal/ops/outboxui"
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
}

// NewHistory makes the scenario; quick uses small sizes. sizes, when not
// empty, overrides them.
func NewHistory(quick bool, sizes []int) *History {
	h := &History{Sizes: []int{10_000, 100_000}, RunSize: 100_000, reads: map[int][3]*Row{}}
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
	h.recon = &Row{Scenario: "10. History", Measure: fmt.Sprintf("one Reconcile call against a run of %s pending members",
		Thousands(float64(h.RunSize))), Unit: Millis,
		Also: []*Figure{{Name: "DB CPU", Unit: Millis}, {Name: "WAL", Unit: Bytes}}}
	h.prune = &Row{Scenario: "10. History", Measure: fmt.Sprintf("Prune of %s sent rows while a %s-member run is pending",
		Thousands(float64(h.Sizes[len(h.Sizes)-1])), Thousands(float64(h.RunSize))), Unit: PerSecond,
		Goal: Goal{Text: "≥ 20,000/s", Check: AtLeast(20_000)},
		Also: []*Figure{{Name: "DB CPU/row", Unit: Micros}, {Name: "WAL/row", Unit: Bytes}, {Name: "mean transaction", Unit: Millis}}}
	h.rows = append(h.rows, h.recon, h.prune)
	return h
}

// Name implements Scenario.
func (h *History) Name() string { return "history" }

// Rows implements Scenario.
func (h *History) Rows() []*Row { return h.rows }

// Notes implements Scenario.
func (h *History) Notes() []string {
	return []string{"History (10): the sent rows are loaded by one INSERT … SELECT generate_series (updated a day ago, sent in the last hour), " +
		"ANALYZEd and CHECKPOINTed before the reads; each read is timed five times after one warm-up, the median shown, with the database's CPU and WAL of the five. " +
		"The /metrics scrape is the worker's registry (outbox, runs and budget collectors) served by its handler; the page is the outbox UI's overview. " +
		"The run's members are pending with live (scheduled) River jobs, so Reconcile finds nothing to give and what is timed is its reading."}
}

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
	loaded := 0
	for _, n := range h.Sizes {
		env.Logf("history: load %d sent rows", n)
		if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload, state, attempts, message_id, job_id,
				first_attempt_at, sent_at, created_at, updated_at, run_key)
			SELECT 'h:' || g, `+historyPayload+`, 'sent', 1, 'm' || g, -1,
				now() - interval '1 day', now() - (g % 3600) * interval '1 second', now() - interval '1 day', now() - interval '1 day',
				CASE WHEN g % 2 = 0 THEN 'hist-run' END
			FROM generate_series($1::bigint + 1, $2::bigint) g`, loaded, n); err != nil {
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
			ms, cpu, wal, err := timed(ctx, env, 5, read)
			if err != nil {
				return fmt.Errorf("history: %s: %w", h.reads[n][i].Measure, err)
			}
			r := h.reads[n][i]
			r.Value.Add(ms)
			r.Also[0].Value.Add(cpu)
			r.Also[1].Value.Add(wal)
		}
	}
	return h.runAndPrune(ctx, env, pool, loaded)
}

func (h *History) runAndPrune(ctx context.Context, env *Env, pool *pgxpool.Pool, sent int) error {
	env.Logf("history: a run of %d pending members", h.RunSize)
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('bench-run') ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'sendonce_send', 25, $2, 'scheduled', now() + interval '1 day' FROM generate_series(1, $1)`, h.RunSize, outbox.DefaultQueue); err != nil {
		return err
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload, job_id, run_key)
		SELECT 'r:' || j.id, `+historyPayload+`, j.id, 'bench-run' FROM river_job j`); err != nil {
		return err
	}
	if _, err := env.Admin.Exec(ctx, `ANALYZE sendonce_outbox, river_job`); err != nil {
		return err
	}
	if err := env.Checkpoint(ctx); err != nil {
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

	env.Logf("history: prune %d sent rows while the run is pending", sent)
	w0, err := env.ReadWAL(ctx)
	if err != nil {
		return err
	}
	c0 := env.ReadCPU()
	start := time.Now()
	// At most two minutes: a prune that fights the run (10 rows/s before
	// issue 26) is measured on what it did by then.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	res, err := sendstate.Prune(pctx, pool, sendstate.PruneOptions{Retain: time.Hour})
	cutOff := pctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil && !cutOff {
		return err
	}
	el := time.Since(start)
	cpuUsed := env.ReadCPU().Sub(c0)
	walUsed, err := env.WALSince(ctx, w0)
	if err != nil {
		return err
	}
	if res.Intents != sent && !cutOff {
		return fmt.Errorf("history: prune deleted %d intents, want the %d sent", res.Intents, sent)
	}
	if cutOff {
		env.Logf("history: prune cut off after %s with %d of %d rows deleted", el.Round(time.Second), res.Intents, sent)
	}
	h.prune.Value.Add(float64(res.Intents) / el.Seconds())
	h.prune.Also[0].Value.Add(float64(cpuUsed.DB.Microseconds()) / float64(max(res.Intents, 1)))
	h.prune.Also[1].Value.Add(float64(walUsed) / float64(max(res.Intents, 1)))
	rounds := (res.Intents + sendstate.DefaultPruneBatch - 1) / sendstate.DefaultPruneBatch
	h.prune.Also[2].Value.Add(float64(el.Milliseconds()) / float64(max(rounds, 1)))
	return nil
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
