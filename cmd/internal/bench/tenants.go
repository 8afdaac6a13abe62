package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/shares"
	"github.com/sendonce/sendonce/outbox"
)

// Tenants is scenario 11: fair shares among tenants (issue 46), in two
// parts.
//
// The cost: scenario 1's drain with its intents spread over 1,000
// tenants, all due, against the same drain of one tenant, alternated in
// each run: the rate, database CPU and WAL per intent of each, and the
// ratio of their database CPU. The fair claim looks at the tenants due
// and claims by shares, a share per tenant (up to 128 a claim): with
// 1,000 tenants a claim of 100 intents is 100 shares of one, where one
// tenant's is one share of 100.
//
// The fairness, at the figures and measured once per benchmark
// (at 20 requests a second it takes minutes): three `sendonce work
// --api-rate 20/s` processes, as scenario 6 starts them, drain the runs
// of tenants a (10,000 members), b and c (1,000 each) and q (a daily
// quota) through a fake API that allows 20 requests a second, while a
// transactional intent of tenant d is committed every half second. In
// windows of 10 s from the first delivery, by the fake's delivery times:
// the shares of a, b and c among the three's deliveries at weights
// 1:1:1, then with a at weight 2 (the window it changes in skipped); d's
// commit-to-delivery latency; whether q stops at its quota while the
// others go on; and the database CPU and WAL per intent of the run.
type Tenants struct {
	p               DrainParams
	cost            *versusClient // the drain over many tenants vs one
	grouped         *versusClient // the same, each tenant's intents enqueued together
	one             costs         // the one tenant's drain's costs
	runs            int
	cpuMany, cpuOne []CPU

	fleet    *RateLimited // the fairness run's fleet: binary, processes
	windows  int          // windows of 10 s at each weight
	quota    int          // q's daily quota
	qIntents int          // q's run members
	ran      bool

	even, weighted, urgent, quotaRow, fleetCost *Row
	evenShares, weightedShares                  []*Figure // min, max of a, b, c
	p50, urgentMax                              *Figure
	unattempted, after                          *Figure
	walPerIntent, dbPerSecond, sent, refused    *Figure
	midnight                                    bool // the database's UTC day changed during the run
}

// The fairness run's backlog and settings.
const (
	// CostTenants is how many tenants the cost drain spreads its intents
	// over.
	CostTenants = 1_000
	// fairWindow is the length of the windows shares are counted in.
	fairWindow = 10 * time.Second
	// fairUrgent is how many transactional intents tenant d commits, one
	// every fairUrgentEvery.
	fairUrgent      = 50
	fairUrgentEvery = 500 * time.Millisecond
)

// fairTenants are the fairness run's tenants whose shares are measured,
// and fairRuns their runs' members (q's run, with its quota, is the
// scenario's own: its size depends on -quick).
var (
	fairTenants = []string{"a", "b", "c"}
	fairRuns    = map[string]int{"a": 10_000, "b": 1_000, "c": 1_000}
)

// TenantName is the name of the i-th benchmark tenant: t0000, t0001, …
func TenantName(i int) string { return fmt.Sprintf("t%04d", i) }

// NewTenants returns scenario 11; quick drains 5,000 intents for the
// cost (5 for each tenant), and runs the fairness with 3 windows at each
// weight instead of 6 and q's quota at 100 of 300 members instead of 500
// of 1,000. binary is the sendonce binary; empty builds ./cmd/sendonce.
func NewTenants(quick bool, binary string) *Tenants {
	p := DrainParams{N: 20_000, Concurrency: 500, FetchCooldown: 10 * time.Millisecond, Tenants: CostTenants}
	s := &Tenants{p: p, windows: 6, quota: 500, qIntents: 1_000,
		fleet: &RateLimited{Binary: binary, workers: 3, concurrency: 10, limit: 20}}
	if quick {
		s.p.N, s.windows, s.quota, s.qIntents = 5_000, 3, 100, 300
	}
	s.cost = newVersus("11. Tenants",
		fmt.Sprintf("drain of %s intents of %s tenants (%d each, all due, enqueued round robin), full path, concurrency %d, fetch cooldown %s, vs the same drain of one tenant",
			Thousands(float64(s.p.N)), Thousands(CostTenants), s.p.N/CostTenants, s.p.Concurrency, s.p.FetchCooldown),
		"one tenant (the default), same drain", "one tenant", newCosts("", "intent"), true)
	s.one = newCosts("one tenant", "intent")
	s.cost.row.Also = append(s.cost.row.Also, s.one.figures()...)
	s.cost.row.Goal = Goal{Text: "DB CPU/intent ≤ 1.2× one tenant's", Check: s.cost.cpuRatio.AtMost(1.2)}
	s.grouped = newVersus("11. Tenants",
		fmt.Sprintf("the same drain of %s tenants with each tenant's intents enqueued together (its batch or run, committed at once), vs the same drain of one tenant",
			Thousands(CostTenants)),
		"one tenant (the default), same drain", "one tenant", newCosts("", "intent"), true)
	s.grouped.row.Goal = Goal{Text: "DB CPU/intent ≤ 1.2× one tenant's", Check: s.grouped.cpuRatio.AtMost(1.2)}

	f := s.fleet
	fleet := fmt.Sprintf("%d × `sendonce work --concurrency %d --api-rate %d/s`, API limit %d/s", f.workers, f.concurrency, f.limit, f.limit)
	shorter := ""
	if quick {
		shorter = " (-quick: 3 windows, not 6)"
	}
	s.evenShares, s.weightedShares = shareFigures(), shareFigures()
	s.even = &Row{
		Scenario: "11. Tenants",
		Measure: fmt.Sprintf("%s: runs of a (10,000), b and c (1,000 each) at weights 1:1:1, each one's share of the three's deliveries in %d windows of 10 s%s while all are backlogged: the largest distance from a third",
			fleet, s.windows, shorter),
		Unit: PercentTenths,
		Also: s.evenShares,
		Goal: Goal{Text: "≤ 5 points (each 33.3% ± 5)", Check: AtMost(0.05)},
	}
	s.weighted = &Row{
		Scenario: "11. Tenants",
		Measure: fmt.Sprintf("the same with a at weight 2, set after those windows (the window it changes in skipped), %d windows%s: the largest distance from a half for a, a quarter for b and c",
			s.windows, shorter),
		Unit: PercentTenths,
		Also: s.weightedShares,
		Goal: Goal{Text: "≤ 5 points (a 50% ± 5)", Check: AtMost(0.05)},
	}
	s.p50 = &Figure{Name: "p50", Unit: Millis}
	s.urgentMax = &Figure{Name: "max", Unit: Millis}
	s.urgent = &Row{
		Scenario: "11. Tenants",
		Measure: fmt.Sprintf("meanwhile, %d transactional intents of a fourth tenant d, one every %s from the first delivery: commit → delivered, p99",
			fairUrgent, fairUrgentEvery),
		Unit: Millis,
		Also: []*Figure{s.p50, s.urgentMax},
		Goal: Goal{Text: "< 1 s", Check: Below(1000)},
	}
	s.unattempted = &Figure{Name: "never attempted", Unit: Count}
	s.after = &Figure{Name: "a, b, c after its last", Unit: Count}
	quotaText := ""
	if quick {
		quotaText = " (-quick: 100 of 300, not 500 of 1,000)"
	}
	s.quotaRow = &Row{
		Scenario: "11. Tenants",
		Measure: fmt.Sprintf("meanwhile, tenant q's run of %s at weight 1 with a daily quota of %d%s: deliveries, until one window after its last",
			Thousands(float64(s.qIntents)), s.quota, quotaText),
		Unit:         Count,
		Baseline:     "its quota",
		BaselineUnit: Count,
		RatioUnit:    Percent,
		Also:         []*Figure{s.unattempted, s.after},
		Goal: Goal{Text: "= its quota, the rest never attempted, the others go on", Check: func(r *Row) bool {
			return r.Value.Len() > 0 && s.unattempted.Value.Len() > 0 && s.after.Value.Median() > 0 &&
				(r.Value.Median() == float64(s.quota) && s.unattempted.Value.Median() == float64(s.qIntents-s.quota) ||
					s.midnight && r.Value.Median() <= float64(2*s.quota))
		}},
	}
	s.walPerIntent = &Figure{Name: "WAL/intent", Unit: Bytes}
	s.dbPerSecond = &Figure{Name: "DB CPU/s", Unit: Micros}
	s.sent = &Figure{Name: "intents sent", Unit: Count}
	s.refused = &Figure{Name: "429s", Unit: Count}
	s.fleetCost = &Row{
		Scenario: "11. Tenants",
		Measure:  "the fairness run above, from the fleet's start to its end: database CPU per intent sent",
		Unit:     Micros,
		Also:     []*Figure{s.walPerIntent, s.dbPerSecond, s.sent, s.refused},
	}
	return s
}

// shareFigures are the least and the largest share of a, b and c in a
// phase's windows.
func shareFigures() []*Figure {
	var out []*Figure
	for _, t := range fairTenants {
		out = append(out, &Figure{Name: t + " min", Unit: PercentTenths}, &Figure{Name: t + " max", Unit: PercentTenths})
	}
	return out
}

// Name is "tenants".
func (s *Tenants) Name() string { return "tenants" }

// Rows are the cost's row, then the fairness run's.
func (s *Tenants) Rows() []*Row {
	return []*Row{s.cost.row, s.grouped.row, s.even, s.weighted, s.urgent, s.quotaRow, s.fleetCost}
}

// Run drains over many tenants and over one, in an order that alternates
// from run to run; on the first run, then the fairness run.
func (s *Tenants) Run(ctx context.Context, env *Env) error {
	if err := s.costRun(ctx, env); err != nil {
		if ctx.Err() != nil {
			return err
		}
		env.Logf("tenants cost: %v", err)
		s.cost.row.Err = err
	}
	if s.ran {
		env.Logf("tenants: the fairness run is measured once per benchmark (it drains at %d/s); skipping it this run", s.fleet.limit)
		return nil
	}
	s.ran = true
	if err := s.fairness(ctx, env); err != nil {
		if ctx.Err() != nil {
			return err
		}
		env.Logf("tenants fairness: %v", err)
		for _, r := range s.Rows()[1:] {
			if r.Err == nil && r.Value.Len() == 0 {
				r.Err = err
			}
		}
	}
	return nil
}

// costRun drains s.p over CostTenants tenants and over one.
func (s *Tenants) costRun(ctx context.Context, env *Env) error {
	one := s.p
	one.Tenants = 0
	grouped := s.p
	grouped.Grouped = true
	var many, together, single DrainResult
	drains := []struct {
		name string
		res  *DrainResult
		p    DrainParams
	}{
		{fmt.Sprintf("%d tenants", CostTenants), &many, s.p},
		{"one tenant", &single, one},
		{fmt.Sprintf("%d tenants enqueued together", CostTenants), &together, grouped},
	}
	for i := range drains {
		dr := drains[(i+s.runs)%len(drains)]
		counting := env.resetStatements(ctx)
		var err error
		if *dr.res, err = DrainOutbox(ctx, env, dr.p); err != nil {
			return fmt.Errorf("%s: %w", dr.name, err)
		}
		if counting {
			env.Logf("tenants cost, %s: per intent, %s", dr.name, env.topStatements(ctx, 15, float64(dr.p.N)))
		}
	}
	s.runs++
	rate, cpu := s.cost.add(many, single)
	grate, gcpu := s.grouped.add(together, single)
	s.one.add(single)
	s.cpuMany = append(s.cpuMany, many.CPUPerJob())
	s.cpuOne = append(s.cpuOne, single.CPUPerJob())
	env.Logf("tenants cost: %d tenants %s, enqueued together %s, one tenant %s; ÷ one: round robin rate %s, DB CPU per intent %s; together rate %s, DB CPU per intent %s",
		CostTenants, many, together, single, Times.Format(rate), Times.Format(cpu), Times.Format(grate), Times.Format(gcpu))
	return nil
}

// fairness runs the fleet once over the fairness backlog and records the
// rows.
//
// It is long because it is the run's setup, phases and measurement in
// the order they happen, which reads best top to bottom.
func (s *Tenants) fairness(ctx context.Context, env *Env) error {
	f := s.fleet
	bin, err := f.binary(ctx, env)
	if err != nil {
		return err
	}
	srv, url, err := s.backlog(ctx, env)
	if err != nil {
		return err
	}
	defer srv.Close()
	dayBefore, err := shares.Day(ctx, env.Admin)
	if err != nil {
		return err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return err
	}

	// The whole run's bound: the phases, q's quota at a fifth of the
	// limit, and a minute to spare.
	phases := time.Duration(2*s.windows+1) * fairWindow
	rctx, cancel := context.WithTimeout(ctx, phases+time.Duration(5*s.quota/f.limit)*time.Second+2*time.Minute)
	defer cancel()
	pgss := env.resetStatements(ctx)
	wal0, err := env.ReadWAL(ctx)
	if err != nil {
		return err
	}
	cpu0, started := env.ReadCPU(), time.Now()
	fleet, stopAll, err := f.startFleet(ctx, bin, env.URL, url, fmt.Sprintf("%d/s", f.limit))
	if err != nil {
		return err
	}
	defer stopAll()
	if err := srv.WaitDeliveries(rctx, 1); err != nil {
		return fmt.Errorf("bench: no delivery: %w", err)
	}
	t0 := srv.Deliveries()[0].DeliveredAt

	// d's transactional intents, while the windows go by.
	ob, err := env.Outbox(env.Admin)
	if err != nil {
		return err
	}
	urgentIntents := Intents("d", fairUrgent)
	for i := range urgentIntents {
		urgentIntents[i].Tenant = "d"
	}
	var urgent shares.Urgent
	urgentDone := make(chan error, 1)
	go func() { urgentDone <- urgent.Enqueue(rctx, env.Admin, ob, urgentIntents, fairUrgentEvery) }()

	// The windows at 1:1:1, a at weight 2, the window it changes in, the
	// windows at 2:1:1.
	if err := shares.WaitDeliveredAfter(rctx, srv, t0.Add(time.Duration(s.windows)*fairWindow)); err != nil {
		return err
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_tenant (name, weight) VALUES ('a', 2)
		ON CONFLICT (name) DO UPDATE SET weight = excluded.weight`); err != nil {
		return fmt.Errorf("bench: a's weight: %w", err)
	}
	reweighted := time.Since(t0)
	if err := shares.WaitDeliveredAfter(rctx, srv, t0.Add(phases)); err != nil {
		return err
	}
	var pendingB, pendingC int
	if err := env.Admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = 'b'), count(*) FILTER (WHERE tenant = 'c')
		FROM sendonce_outbox WHERE state = 'pending'`).Scan(&pendingB, &pendingC); err != nil {
		return fmt.Errorf("bench: count b's and c's pending: %w", err)
	}
	// q at its quota (or as far as it gets by the time a fifth of the
	// limit takes for it, and a minute), then one window more: it must
	// send no more while the others go on.
	qctx, qcancel := context.WithTimeout(rctx, time.Duration(5*s.quota/f.limit)*time.Second+time.Minute)
	lastQ, err := s.waitQuota(qctx, srv)
	qcancel()
	if err != nil {
		return err
	}
	if err := shares.WaitDeliveredAfter(rctx, srv, lastQ.Add(fairWindow)); err != nil {
		return err
	}
	// The database's CPU is read before the workers stop: their backends
	// end with them.
	cpu := env.ReadCPU().Sub(cpu0)
	elapsed := time.Since(started)
	deliveries := srv.Deliveries()
	wal, err := env.WALSince(ctx, wal0)
	if err != nil {
		return err
	}
	if err := <-urgentDone; err != nil {
		return fmt.Errorf("bench: d's transactional intents: %w", err)
	}
	if pgss {
		env.Logf("tenants fairness: per intent, %s", env.topStatements(ctx, 20, float64(len(deliveries))))
	}
	for i, p := range fleet {
		if err := p.stop(); err != nil {
			env.Logf("tenants fairness: worker %d ended: %v; output: %s", i, err, tail(p.logs.String(), 400))
		}
	}
	dayAfter, err := shares.Day(ctx, env.Admin)
	if err != nil {
		return err
	}
	s.midnight = !dayAfter.Equal(dayBefore)

	if dup := shares.Duplicates(deliveries); len(dup) > 0 {
		keepLogs(env, "tenants", fleet)
		return fmt.Errorf("bench: EXACTLY-ONCE BROKEN: %d keys delivered more than once", len(dup))
	}
	var trouble []string
	if pendingB == 0 || pendingC == 0 {
		trouble = append(trouble, fmt.Sprintf("b (%d pending) or c (%d pending) ran dry before the last window", pendingB, pendingC))
	}
	if late := time.Duration(s.windows+1)*fairWindow - 2*time.Second; reweighted > late {
		trouble = append(trouble, fmt.Sprintf("a's weight set %s after the first delivery, too late in its window", reweighted.Round(time.Millisecond)))
	}
	if len(trouble) > 0 {
		return errors.New("bench: " + strings.Join(trouble, "; "))
	}

	windows := shares.Windows(deliveries, t0, fairWindow, 2*s.windows+1)
	for i, w := range windows {
		phase := "1:1:1"
		switch {
		case i > s.windows:
			phase = "2:1:1"
		case i == s.windows:
			phase = "weight changing (skipped)"
		}
		env.Logf("tenants fairness: window %d [%d s, %d s) %s: %s; q %d, d %d", i, 10*i, 10*i+10, phase,
			shares.Text(w, fairTenants...), w["q"], w["d"])
	}
	s.recordShares(s.even, s.evenShares, windows[:s.windows], []float64{1.0 / 3, 1.0 / 3, 1.0 / 3})
	s.recordShares(s.weighted, s.weightedShares, windows[s.windows+1:], []float64{0.5, 0.25, 0.25})

	lat, missing := urgent.Latencies(deliveries)
	if missing > 0 {
		s.urgent.Err = fmt.Errorf("%d of d's %d transactional intents not delivered by the end of the run", missing, fairUrgent)
	} else {
		s.urgent.Value.Add(millis(Percentile(lat, 99)))
		s.p50.Value.Add(millis(Percentile(lat, 50)))
		s.urgentMax.Value.Add(millis(Percentile(lat, 100)))
	}
	env.Logf("tenants fairness: d, commit → delivered: p50 %s, p99 %s, max %s (%d delivered of %d)",
		Percentile(lat, 50).Round(time.Millisecond), Percentile(lat, 99).Round(time.Millisecond),
		Percentile(lat, 100).Round(time.Millisecond), len(lat), fairUrgent)

	if err := s.recordQuota(ctx, env, deliveries, lastQ, t0, dayBefore, dayAfter); err != nil {
		return err
	}

	n := len(deliveries)
	refused := srv.RateLimited()
	env.Logf("tenants fairness: %s intents sent in %s: CPU per intent in the database %s, WAL per intent %s; %d refused with 429",
		Thousands(float64(n)), elapsed.Round(time.Millisecond), (cpu.DB / time.Duration(max(n, 1))).Round(time.Microsecond),
		Bytes.Format(float64(wal)/float64(max(n, 1))), refused)
	if cpu.DB > 0 {
		s.fleetCost.Value.Add(micros(cpu.DB) / float64(n))
		s.dbPerSecond.Value.Add(micros(cpu.DB) / elapsed.Seconds())
	} else {
		s.fleetCost.Err = errors.New("the database's backends were not readable")
	}
	s.walPerIntent.Value.Add(float64(wal) / float64(n))
	s.sent.Value.Add(float64(n))
	s.refused.Value.Add(float64(refused))
	for _, r := range []*Row{s.even, s.weighted, s.urgent, s.quotaRow} {
		if r.Err == nil && !r.Goal.Check(r) {
			keepLogs(env, "tenants", fleet)
			break
		}
	}
	return nil
}

// backlog empties the database, starts a fake API at the fleet's limit,
// and enqueues the fairness run's runs: a, b, c and q (with its quota).
func (s *Tenants) backlog(ctx context.Context, env *Env) (*fakeapi.Server, string, error) {
	if err := env.Reset(ctx); err != nil {
		return nil, "", err
	}
	if _, err := env.Admin.Exec(ctx, `DELETE FROM sendonce_run WHERE key LIKE 'tenants-%'`); err != nil {
		return nil, "", fmt.Errorf("bench: remove the last runs: %w", err)
	}
	ob, err := env.Outbox(env.Admin)
	if err != nil {
		return nil, "", err
	}
	runs := maps.Clone(fairRuns)
	runs["q"] = s.qIntents
	for _, tenant := range slices.Sorted(maps.Keys(runs)) {
		if err := enqueueTenantRun(ctx, env.Admin, ob, tenant, runs[tenant]); err != nil {
			return nil, "", err
		}
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_tenant (name, quota_day) VALUES ('q', $1)
		ON CONFLICT (name) DO UPDATE SET quota_day = excluded.quota_day`, s.quota); err != nil {
		return nil, "", fmt.Errorf("bench: q's quota: %w", err)
	}
	srv := fakeapi.New(fakeapi.Config{APIKeys: []string{APIKey}, Rate: []fakeapi.RateLimit{{Count: s.fleet.limit, Per: time.Second}}})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, "", fmt.Errorf("bench: start fake API: %w", err)
	}
	return srv, url, nil
}

// enqueueTenantRun enqueues the run tenants-TENANT of n emails of tenant,
// keyed tenant:i, 1,000 members a transaction.
func enqueueTenantRun(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, tenant string, n int) error {
	intents := Intents(tenant, n)
	for len(intents) > 0 {
		part := intents[:min(1000, len(intents))]
		intents = intents[len(part):]
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "tenants-" + tenant, Tenant: tenant, Intents: part})
			return err
		})
		if err != nil {
			return fmt.Errorf("bench: enqueue %s's run: %w", tenant, err)
		}
	}
	return nil
}

// waitQuota waits until q has been sent its quota, or ctx ends (then q's
// last delivery by then will do), and returns q's last delivery.
func (s *Tenants) waitQuota(ctx context.Context, srv *fakeapi.Server) (time.Time, error) {
	for {
		ds := srv.Deliveries()
		sent, last := 0, time.Time{}
		for _, d := range ds {
			if shares.Tenant(d.IdempotencyKey) == "q" {
				sent, last = sent+1, d.DeliveredAt
			}
		}
		if sent >= s.quota {
			return last, nil
		}
		if err := srv.WaitDeliveries(ctx, len(ds)+1); err != nil {
			if last.IsZero() {
				return last, fmt.Errorf("bench: q was sent nothing: %w", err)
			}
			return last, nil
		}
	}
}

// recordShares records a phase's windows in row: the largest distance of
// a tenant's share of a, b and c's deliveries from want (in
// fairTenants' order), and each one's least and largest share (figs: min
// and max of each, in that order).
func (s *Tenants) recordShares(row *Row, figs []*Figure, windows []map[string]int, want []float64) {
	worst := 0.0
	seen := make([]Samples, len(fairTenants))
	for _, w := range windows {
		got, of := shares.Of(w, fairTenants...)
		if of == 0 {
			row.Err = errors.New("a window without a delivery of a, b or c")
			return
		}
		for i := range fairTenants {
			seen[i].Add(got[i])
			worst = max(worst, got[i]-want[i], want[i]-got[i])
		}
	}
	for i := range fairTenants {
		figs[2*i].Value.Add(seen[i].Min())
		figs[2*i+1].Value.Add(seen[i].Max())
	}
	row.Value.Add(worst)
}

// recordQuota records q's deliveries, its members never attempted and
// the others' deliveries after its last.
func (s *Tenants) recordQuota(ctx context.Context, env *Env, deliveries []fakeapi.Delivery, lastQ, t0, dayBefore, dayAfter time.Time) error {
	sent, after := 0, 0
	for _, d := range deliveries {
		switch tenant := shares.Tenant(d.IdempotencyKey); {
		case tenant == "q":
			sent++
		case tenant != "d" && d.DeliveredAt.After(lastQ):
			after++
		}
	}
	var unattempted, counted int
	if err := env.Admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending' AND attempts = 0),
		(SELECT coalesce(max(day_count), 0) FROM sendonce_tenant WHERE name = 'q')
		FROM sendonce_outbox WHERE tenant = 'q'`).Scan(&unattempted, &counted); err != nil {
		return fmt.Errorf("bench: count q's intents: %w", err)
	}
	env.Logf("tenants fairness: q: %d sent of %d (quota %d a day), %d never attempted, the day's count %d; its last %s after the first delivery, then %d of a, b and c",
		sent, s.qIntents, s.quota, unattempted, counted, lastQ.Sub(t0).Round(time.Millisecond), after)
	if s.midnight {
		env.Logf("tenants fairness: the database's UTC day changed during the run (%s → %s): q's quota counted two days",
			dayBefore.Format(time.DateOnly), dayAfter.Format(time.DateOnly))
	}
	s.quotaRow.Value.Add(float64(sent))
	s.quotaRow.BaselineValue.Add(float64(s.quota))
	s.quotaRow.Ratio.Add(float64(sent) / float64(s.quota))
	s.unattempted.Value.Add(float64(unattempted))
	s.after.Value.Add(float64(after))
	return nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Notes describe the measurement.
func (s *Tenants) Notes() []string {
	f := s.fleet
	return []string{fmt.Sprintf("**11. Tenants.** The cost: scenario 1's drain (%s intents, concurrency %d, fetch cooldown %s, "+
		"one `worker.New` in this process against the in-process fake API) twice in each run, the order alternating from run "+
		"to run: once with the intents spread over %s tenants (intent i is tenant t(i mod %s)'s: each tenant's are spread "+
		"evenly through the enqueue order, none first), all due, every tenant at weight 1 without limits; once with all of "+
		"them the default tenant's. DB CPU/intent and WAL/intent as in scenario 1; the goal is on the ratio of the database "+
		"CPU per intent, run by run. CPU per intent (median of runs): %s tenants %s; one tenant %s.",
		Thousands(float64(s.p.N)), s.p.Concurrency, s.p.FetchCooldown, Thousands(CostTenants), Thousands(CostTenants),
		Thousands(CostTenants), medianCPU(s.cpuMany), medianCPU(s.cpuOne)),
		fmt.Sprintf("The fairness run, measured once per benchmark: `go build ./cmd/sendonce`; the runs of tenants a (10,000 "+
			"members), b, c (1,000 each) and q (%s, `quota_day` %d in `sendonce_tenant`) are enqueued (not timed); then %d "+
			"`sendonce work --concurrency %d --api-rate %d/s --http-addr \"\"` processes drain them through the in-process fake "+
			"API, which allows %d requests a second per API key. From the first delivery, a transactional intent of tenant d is "+
			"committed every %s (%d of them). Windows of 10 s from the first delivery, by the fake's delivery times: %d at "+
			"weights 1:1:1; then a's weight is set to 2 by SQL (workers read it within a second), that window is skipped, "+
			"and %d more at 2:1:1. A share is a tenant's deliveries over a, b and c's in the window (q's and d's take their "+
			"own part of the budget beside them); the row's figure is the largest distance from the target over the phase's "+
			"windows and the three tenants, with each one's least and largest share beside it. b and c must still have "+
			"intents pending at the end of the last window. d's latency is from the start of its transaction to its delivery "+
			"(p99 of 50 by nearest rank: the slowest). q's row runs until q has been sent its quota and one window more; "+
			"q's quota counts the database's UTC day: should the run cross midnight there, q may be sent its quota twice, "+
			"which the goal accepts and the progress output says. Database CPU and WAL per intent are over the whole run "+
			"(from the fleet's start, read before it stops) over the intents sent, without a baseline of their own: scenario "+
			"6's River + limiter figure is the same fleet's without sendonce.",
			Thousands(float64(s.qIntents)), s.quota, f.workers, f.concurrency, f.limit, f.limit, fairUrgentEvery, fairUrgent,
			s.windows, s.windows)}
}

// Close removes the built binary.
func (s *Tenants) Close() error { return s.fleet.Close() }
