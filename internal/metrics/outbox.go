package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.Registry.MustRegister(&outboxCollector{ob: ob, timeout: timeout, logger: logger})
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
