package metrics

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/outbox"
)

// StatsReader reads the outbox's counts: an *outbox.Outbox.
type StatsReader interface {
	Stats(ctx context.Context) (*outbox.Stats, error)
}

// WatchOutbox registers a collector that reads the outbox's Stats
// each time the registry is scraped, bounded by timeout (5 s when zero), and
// reports sendonce_outbox_intents{state} and
// sendonce_outbox_oldest_pending_age_seconds. When the database does not
// answer, the scrape carries neither metric (rather than stale or zero
// values that would look healthy) and the error is logged at warn level.
func (m *Metrics) WatchOutbox(ob StatsReader, timeout time.Duration, logger *slog.Logger) {
	timeout, logger = watchDefaults(timeout, logger)
	m.Registry.MustRegister(&outboxCollector{ob: ob, timeout: timeout, logger: logger})
}

// watchDefaults fills in a scrape-time read's bound (5 s) and logger.
func watchDefaults(timeout time.Duration, logger *slog.Logger) (time.Duration, *slog.Logger) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return timeout, logger
}

var (
	intentsDesc = prometheus.NewDesc(Namespace+"_outbox_intents",
		"Intents in the outbox by state, read from the database at scrape time.", []string{"state"}, nil)
	oldestPendingDesc = prometheus.NewDesc(Namespace+"_outbox_oldest_pending_age_seconds",
		"Age of the oldest intent that is due and not yet sent (pending or sending); 0 when there is none.", nil, nil)
)

type outboxCollector struct {
	ob      StatsReader
	timeout time.Duration
	logger  *slog.Logger
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- intentsDesc
	ch <- oldestPendingDesc
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.ob.Stats(ctx)
	if err != nil {
		c.logger.Warn("metrics: cannot read outbox stats; scrape carries no outbox metrics", "error", err)
		return
	}
	for _, s := range outbox.States {
		ch <- prometheus.MustNewConstMetric(intentsDesc, prometheus.GaugeValue, float64(st.Counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, st.OldestPending.Seconds())
}

// WatchBudget registers a collector that reads the fleet's send budgets
// from the database at scrape time: sendonce_budget_rate{key} (requests per
// second the fleet sends at; 0 before the first lease), sendonce_budget_ceiling{key}
// (the configured rate), sendonce_budget_paused_seconds{key} and
// sendonce_budget_throttles_total{key}. key is the API key's fingerprint,
// never the key.
func (m *Metrics) WatchBudget(db BudgetReader, timeout time.Duration, logger *slog.Logger) {
	timeout, logger = watchDefaults(timeout, logger)
	m.Registry.MustRegister(&budgetCollector{db: db, timeout: timeout, logger: logger})
}

// BudgetReader is what WatchBudget reads with: a *pgxpool.Pool.
type BudgetReader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var (
	budgetRateDesc = prometheus.NewDesc(Namespace+"_budget_rate",
		"Send requests per second the fleet sends at for the API key (0: no lease yet; rising in slow start until a limit is met).", []string{"key"}, nil)
	budgetCeilingDesc = prometheus.NewDesc(Namespace+"_budget_ceiling",
		"The configured rate limit in requests per second (0: found from 429s).", []string{"key"}, nil)
	budgetPausedDesc = prometheus.NewDesc(Namespace+"_budget_paused_seconds",
		"How much longer the fleet waits before its next send (a Retry-After).", []string{"key"}, nil)
	budgetThrottlesDesc = prometheus.NewDesc(Namespace+"_budget_throttles_total",
		"429s that lowered the fleet's rate.", []string{"key"}, nil)
)

type budgetCollector struct {
	db      BudgetReader
	timeout time.Duration
	logger  *slog.Logger
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetRateDesc
	ch <- budgetCeilingDesc
	ch <- budgetPausedDesc
	ch <- budgetThrottlesDesc
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	sts, err := budget.Read(ctx, c.db)
	if err != nil {
		c.logger.Warn("metrics: cannot read the send budget; scrape carries no budget metrics", "error", err)
		return
	}
	for _, st := range sts {
		ch <- prometheus.MustNewConstMetric(budgetRateDesc, prometheus.GaugeValue, st.Rate, st.KeyFingerprint)
		ch <- prometheus.MustNewConstMetric(budgetCeilingDesc, prometheus.GaugeValue, st.Ceiling, st.KeyFingerprint)
		ch <- prometheus.MustNewConstMetric(budgetPausedDesc, prometheus.GaugeValue, st.PausedFor.Seconds(), st.KeyFingerprint)
		ch <- prometheus.MustNewConstMetric(budgetThrottlesDesc, prometheus.CounterValue, float64(st.Throttles), st.KeyFingerprint)
	}
}

// RunsReader lists runs: an *outbox.Outbox.
type RunsReader interface {
	Runs(ctx context.Context, p *outbox.RunListParams) ([]*outbox.RunStatus, error)
}

var runIntentsDesc = prometheus.NewDesc(Namespace+"_run_intents",
	"Members of each run not yet done (and of paused runs), by state, read from the database at scrape time.",
	[]string{"run", "run_state", "state"}, nil)

// WatchRuns registers a collector that reports the progress of the runs
// that are not done (of the latest 50): sendonce_run_intents{run,
// run_state, state}. A run drops out of the metric once done.
func (m *Metrics) WatchRuns(runs RunsReader, timeout time.Duration, logger *slog.Logger) {
	timeout, logger = watchDefaults(timeout, logger)
	m.Registry.MustRegister(&runsCollector{runs: runs, timeout: timeout, logger: logger})
}

type runsCollector struct {
	runs    RunsReader
	timeout time.Duration
	logger  *slog.Logger
}

var runBreakerDesc = prometheus.NewDesc(Namespace+"_run_breaker_paused",
	"1 for each run (of the latest 50) its bounce-rate breaker holds paused, by what tripped it (bounces or complaints), read from the database at scrape time.",
	[]string{"run", "reason"}, nil)

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runIntentsDesc
	ch <- runBreakerDesc
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	runs, err := c.runs.Runs(ctx, nil)
	if err != nil {
		c.logger.Warn("metrics: cannot read runs; scrape carries no run metrics", "error", err)
		return
	}
	for _, r := range runs {
		if r.State == outbox.RunPaused && r.Breaker != nil && r.Breaker.Reason != "" {
			reason := "bounces"
			if strings.HasPrefix(r.Breaker.Reason, "complaint") {
				reason = "complaints"
			}
			ch <- prometheus.MustNewConstMetric(runBreakerDesc, prometheus.GaugeValue, 1, r.Key, reason)
		}
		if r.Done() {
			continue
		}
		for _, s := range outbox.States {
			ch <- prometheus.MustNewConstMetric(runIntentsDesc, prometheus.GaugeValue, float64(r.Counts[s]), r.Key, string(r.State), string(s))
		}
	}
}
