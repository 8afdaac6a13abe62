package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sendonce/sendonce/cmd/internal/ops/metrics"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestWatchTenantsLabelsBoundedTenants: the tenant metrics name the
// default tenant and the configured tenants, at most 100 of them (the
// first by name), and add every other tenant up under _other: backlog by
// class, claims of the last minute from the live workers' leases (a
// worker that says nothing adds nothing; none that says, no series), and
// the tenants held back, by reason.
func TestWatchTenantsLabelsBoundedTenants(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	m := metrics.New()
	m.WatchTenants(pool, 0, nil)
	text := scrape(t, m)
	wantLine(t, text, `sendonce_tenant_backlog{class="transactional",tenant="default"} 0`)
	wantLine(t, text, `sendonce_tenant_backlog{class="bulk",tenant="_other"} 0`)
	wantLine(t, text, `sendonce_tenant_held{reason="rate",tenant="default"} 0`)
	if strings.Contains(text, "sendonce_tenant_claimed_last_minute") {
		t.Errorf("claims reported while no worker says what it claimed:\n%s", text)
	}

	payload := `'{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}'`
	// default: 1 pending; acme (configured): 2, held by its day's quota;
	// beta: 3; gamma: a paused run of 2; n000 to n101 configured, n101
	// held by its quota with 1 pending; a worker's claims.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key, tenant, state) VALUES ('digest:gamma', 'gamma', 'paused')`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, tenant, run_key)
		SELECT k, `+payload+`, tenant, run FROM (VALUES ('d:1', NULL, NULL), ('a:1', 'acme', NULL), ('a:2', 'acme', NULL),
			('b:1', 'beta', NULL), ('b:2', 'beta', NULL), ('b:3', 'beta', NULL),
			('g:1', 'gamma', 'digest:gamma'), ('g:2', 'gamma', 'digest:gamma'), ('n:1', 'n101', NULL)) v(k, tenant, run)`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, weight, quota_day, day_start, day_count)
		VALUES ('acme', 3, 5, date_trunc('day', now(), 'UTC'), 5), ('', 2, NULL, NULL, 0)`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day, day_start, day_count)
		SELECT 'n' || lpad(g::text, 3, '0'), CASE WHEN g = 101 THEN 1 END, date_trunc('day', now(), 'UTC'), 1 FROM generate_series(0, 101) g`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, lease_until, tenants, ended_at, end_reason) VALUES
		(1, 1, 'a', 1, now() + interval '1 minute', '{"": 3, "acme": 1, "beta": 5, "*": 2}', NULL, NULL),
		(2, 2, 'b', 2, now() + interval '1 minute', NULL, NULL, NULL),
		(3, 3, 'c', 3, now() - interval '1 minute', '{"acme": 1000}', now(), 'stopped')`)

	text = scrape(t, m)
	for _, l := range []string{
		`sendonce_tenant_backlog{class="transactional",tenant="default"} 1`,
		`sendonce_tenant_backlog{class="transactional",tenant="acme"} 2`,
		`sendonce_tenant_backlog{class="bulk",tenant="acme"} 0`,
		`sendonce_tenant_backlog{class="transactional",tenant="_other"} 4`, // beta's 3, n101's 1
		`sendonce_tenant_backlog{class="bulk",tenant="_other"} 2`,          // gamma's
		`sendonce_tenant_backlog{class="transactional",tenant="n098"} 0`,
		`sendonce_tenant_held{reason="quota_day",tenant="acme"} 1`,
		`sendonce_tenant_held{reason="rate",tenant="acme"} 0`,
		`sendonce_tenant_held{reason="quota_day",tenant="_other"} 1`,  // n101
		`sendonce_tenant_held{reason="paused_run",tenant="_other"} 1`, // gamma
		`sendonce_tenant_held{reason="paused_run",tenant="default"} 0`,
		`sendonce_tenant_claimed_last_minute{tenant="default"} 3`,
		`sendonce_tenant_claimed_last_minute{tenant="acme"} 1`,
		`sendonce_tenant_claimed_last_minute{tenant="_other"} 7`, // beta's 5 and the 2 not attributed
	} {
		wantLine(t, text, l)
	}
	for _, name := range []string{"beta", "gamma", "n099", "n100", "n101"} {
		if strings.Contains(text, `tenant="`+name+`"`) {
			t.Errorf("the metrics name tenant %s, which is neither configured nor among the first 100 configured", name)
		}
	}
	// default (whose settings take none of the 100), acme, n000 to n098
	// (100 configured), _other; two classes each.
	if n := testutil.CollectAndCount(m.Registry, "sendonce_tenant_backlog"); n != 2*102 {
		t.Errorf("sendonce_tenant_backlog has %d series, want %d", n, 2*102)
	}
}
