package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/ops/tenants"
)

// The tenant label (see docs/tenants.md). A label's values must stay few,
// whatever the tenants: the metrics name the default tenant ("default"),
// and the tenants an operator configured (a row in sendonce_tenant, made
// by sendonce tenant set), at most NamedTenants of them, the first by
// name; every other tenant is added up under OtherTenant. A tenant's name
// cannot start with "_" (outbox.TenantPattern), so OtherTenant is never
// one.
const (
	NamedTenants = 100
	OtherTenant  = "_other"
)

var (
	tenantBacklogDesc = prometheus.NewDesc(Namespace+"_tenant_backlog",
		"Intents pending without a River job, by tenant (the default tenant, the configured ones, the rest as _other) and class "+
			"(transactional: of no run; bulk: of runs), read at scrape time; counted up to 10001 each, which means more than 10000.",
		[]string{"tenant", "class"}, nil)
	tenantClaimedDesc = prometheus.NewDesc(Namespace+"_tenant_claimed_last_minute",
		"Intents the live workers claimed in the last minute, by tenant, as their leases say (absent when none says).",
		[]string{"tenant"}, nil)
	tenantHeldDesc = prometheus.NewDesc(Namespace+"_tenant_held",
		"Tenants with intents pending that something holds back now, by tenant and reason "+
			"(quota_day, quota_month: a quota used up; rate: its rate; paused_run: a paused run with pending members); 0 or 1 for a named tenant.",
		[]string{"tenant", "reason"}, nil)
)

// WatchTenants registers a collector that reads the tenants at scrape time
// (tenants.ReadFleet, bounded by timeout, 5 s when zero):
// sendonce_tenant_backlog{tenant,class}, sendonce_tenant_claimed_last_minute{tenant}
// and sendonce_tenant_held{tenant,reason}, with the tenant label's rule
// above. When the database does not answer the scrape carries none of
// them, and the error is logged at warn level.
func (m *Metrics) WatchTenants(db planguard.Beginner, timeout time.Duration, logger *slog.Logger) {
	timeout, logger = watchDefaults(timeout, logger)
	m.Registry.MustRegister(&tenantsCollector{db: db, timeout: timeout, logger: logger})
}

type tenantsCollector struct {
	db      planguard.Beginner
	timeout time.Duration
	logger  *slog.Logger
}

func (c *tenantsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantBacklogDesc
	ch <- tenantClaimedDesc
	ch <- tenantHeldDesc
}

func (c *tenantsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	f, err := tenants.ReadFleet(ctx, c.db, NamedTenants)
	if err != nil {
		c.logger.Warn("metrics: cannot read the tenants; scrape carries no tenant metrics", "error", err)
		return
	}
	report := f.Claims.Reporting > 0
	backlog := func(label string, b tenants.Backlog) {
		for _, cl := range []struct {
			name string
			n    int64
			more bool
		}{{"transactional", b.Transactional, b.TransactionalMore}, {"bulk", b.Bulk, b.BulkMore}} {
			if cl.more {
				cl.n++
			}
			ch <- prometheus.MustNewConstMetric(tenantBacklogDesc, prometheus.GaugeValue, float64(cl.n), label, cl.name)
		}
	}
	for _, t := range f.Named {
		backlog(t.Name, t.Backlog)
		if report {
			ch <- prometheus.MustNewConstMetric(tenantClaimedDesc, prometheus.GaugeValue, float64(*t.Claimed), t.Name)
		}
		held := map[string]bool{}
		for _, h := range t.HeldBy {
			held[h.Reason] = true
		}
		for _, r := range tenants.Reasons {
			v := 0.0
			if held[r] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(tenantHeldDesc, prometheus.GaugeValue, v, t.Name, r)
		}
	}
	backlog(OtherTenant, f.Other.Backlog)
	if report {
		ch <- prometheus.MustNewConstMetric(tenantClaimedDesc, prometheus.GaugeValue, float64(f.Other.Claimed), OtherTenant)
	}
	for _, r := range tenants.Reasons {
		ch <- prometheus.MustNewConstMetric(tenantHeldDesc, prometheus.GaugeValue, float64(f.Other.Held[r]), OtherTenant, r)
	}
}
