package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// tenantRow is a tenant's row of sendonce_tenant, NULLs as "-".
func tenantRow(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	var row string
	err := pool.QueryRow(t.Context(), `SELECT coalesce((SELECT concat_ws(' ', weight, coalesce(rate::text, '-'),
			coalesce(quota_day::text, '-'), coalesce(quota_month::text, '-')) FROM sendonce_tenant WHERE name = $1), 'none')`, name).Scan(&row)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// TestTenantSetShowReset: tenant set writes the flags given and keeps the
// others, --rate none and --quota none remove a limit, --quota sets the
// quotas to those given; show prints a tenant with settings or without,
// "default" is the default tenant's row (the empty name), and reset
// deletes the row.
func TestTenantSetShowReset(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)

	r := sendonce(t, env, "", "tenant", "set", "acme", "--weight", "5", "--rate", "5/s", "--quota", "10000/d,300000/mo")
	wantOK(t, r)
	for _, want := range []string{"set tenant acme\n", "weight:   5\n", "limits:   5/s, 10000/d (0 used today), 300000/mo (0 used this month)\n",
		"backlog:  0\n", "held by:  nothing\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tenant set acme: %q lacks %q", r.stdout, want)
		}
	}
	for _, step := range []struct {
		args []string
		want string // the row after: weight rate quota_day quota_month
	}{
		{[]string{"--weight", "7"}, "7 5 10000 300000"},
		{[]string{"--quota", "20000/d"}, "7 5 20000 -"},
		{[]string{"--quota", "300000/mo,20000/d"}, "7 5 20000 300000"},
		{[]string{"--rate", "none"}, "7 - 20000 300000"},
		{[]string{"--quota", "none", "--rate", "600/m"}, "7 10 - -"},
	} {
		wantOK(t, sendonce(t, env, "", append([]string{"tenant", "set", "acme"}, step.args...)...))
		if got := tenantRow(t, pool, "acme"); got != step.want {
			t.Errorf("after tenant set acme %s: the row is %q, want %q", strings.Join(step.args, " "), got, step.want)
		}
	}
	if r = sendonce(t, env, "", "tenant", "show", "acme"); !strings.Contains(r.stdout, "limits:   10/s\n") {
		t.Errorf("tenant show acme after --rate 600/m:\n%s", r.stdout)
	}
	wantOK(t, sendonce(t, env, "", "tenant", "set", "acme", "--rate", "1/h"))
	if r = sendonce(t, env, "", "tenant", "show", "acme"); !strings.Contains(r.stdout, "limits:   1/h\n") {
		t.Errorf("tenant show acme after --rate 1/h:\n%s", r.stdout)
	}

	wantOK(t, sendonce(t, env, "", "tenant", "set", "default", "--weight", "3"))
	if got := tenantRow(t, pool, ""); got != "3 - - -" {
		t.Errorf("tenant set default: the default tenant's row ('') is %q", got)
	}
	r = sendonce(t, env, "", "tenant", "show", "default", "--json")
	wantOK(t, r)
	var shown struct {
		Tenant     string
		Configured bool
		Weight     int
		HeldBy     []any
		Share      *float64
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.Tenant != "default" || !shown.Configured || shown.Weight != 3 ||
		shown.HeldBy == nil || shown.Share != nil {
		t.Errorf("tenant show default --json: %s (%v)", r.stdout, err)
	}
	r = sendonce(t, env, "", "tenant", "show", "nobody")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "weight:   1\n") || !strings.Contains(r.stdout, "limits:   none (no settings: weight 1, no limits)\n") {
		t.Errorf("tenant show of a tenant without settings:\n%s", r.stdout)
	}

	r = sendonce(t, env, "", "tenant", "reset", "acme")
	wantOK(t, r)
	if r.stdout != "reset tenant acme: weight 1, no limits (its settings and counts are deleted)\n" || tenantRow(t, pool, "acme") != "none" {
		t.Errorf("tenant reset acme: %q, row %q", r.stdout, tenantRow(t, pool, "acme"))
	}
	if r = sendonce(t, env, "", "tenant", "reset", "acme"); r.stdout != "tenant acme had no settings: weight 1, no limits\n" {
		t.Errorf("tenant reset acme again: %q", r.stdout)
	}
}

// TestTenantSetRefusals: a bad name or flag is refused with exit 2 and a
// line naming what was wrong, before anything is written: the tenant's
// row is as it was, even when another flag of the same command was good.
func TestTenantSetRefusals(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	wantOK(t, sendonce(t, env, "", "tenant", "set", "acme", "--weight", "4", "--rate", "2/s"))
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"acme", "--weight", "0"}, "--weight 0: want 1 to 1000"},
		{[]string{"acme", "--weight", "1001"}, "--weight 1001: want 1 to 1000"},
		{[]string{"acme", "--weight", "x"}, `invalid argument "x" for "--weight"`},
		{[]string{"acme", "--weight", "5", "--rate", "100/d"}, "--rate 100/d is a quota (per day or month): give it as --quota 100/d"},
		{[]string{"acme", "--quota", "5/s"}, "--quota 5/s is a rate (per second, minute or hour): give it as --rate 5/s"},
		{[]string{"acme", "--quota", "10000/d,600/m"}, "--quota 600/m is a rate"},
		{[]string{"acme", "--rate", "0/s"}, "the count must be 1 or more"},
		{[]string{"acme", "--quota", "0/d"}, "the count must be 1 or more"},
		{[]string{"acme", "--quota", "1/d,2/d"}, "two quotas per day"},
		{[]string{"acme", "--rate", "5/s,10/m"}, "give one rate"},
		{[]string{"acme", "--rate", "fast"}, "want COUNT/UNIT"},
		{[]string{"acme", "--rate", "5/w"}, `unknown unit "w"`},
		{[]string{"acme", "--rate", "2000000/s"}, "at most 1000000/s"},
		{[]string{"acme", "--rate", ""}, "want COUNT/UNIT"},
		{[]string{"acme"}, "nothing to set: give --weight, --rate or --quota"},
		{[]string{"Acme", "--weight", "2"}, `invalid tenant: "Acme"`},
		{[]string{"", "--weight", "2"}, `want a tenant's name, or "default"`},
		{[]string{"--weight", "2"}, "want one tenant's name"},
	} {
		r := sendonce(t, env, "", append([]string{"tenant", "set"}, tc.args...)...)
		wantError(t, r, 2, tc.says)
		if got := tenantRow(t, pool, "acme"); got != "4 2 - -" {
			t.Fatalf("tenant set %s changed the row to %q", strings.Join(tc.args, " "), got)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_tenant`); n != 1 {
		t.Errorf("%d rows of sendonce_tenant, want acme's only", n)
	}
	wantError(t, sendonce(t, env, "", "tenant", "show", "Acme"), 2, `invalid tenant: "Acme"`)
	wantError(t, sendonce(t, env, "", "tenant", "reset"), 2, "want one tenant's name")
	wantError(t, sendonce(t, env, "", "tenants", "--limit", "0"), 2, "--limit 0: want 1 to 1000")
	wantError(t, sendonce(t, env, "", "tenants", "--after", "Acme"), 2, `invalid tenant: "Acme"`)
	// A database without migration 00031 says so.
	empty := dbEnv(emptyDatabase(t))
	wantError(t, sendonce(t, empty, "", "tenant", "set", "acme", "--weight", "2"), 1, "migrat")
}

// TestTenantsTable: sendonce tenants lists the tenants with intents
// pending or settings, the default tenant first: weight, limits and what
// was used of the quotas, the backlog by class counted up to 10,000, the
// share of what the live workers claimed in the last minute (a worker
// that says nothing, or has ended, adds nothing), and what holds each back
// (a quota used up until its period ends, the rate, a paused run); the
// same as JSON, and a page at a time.
func TestTenantsTable(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	if r := sendonce(t, env, "", "tenants"); r.stdout != "no tenants: none has intents pending or settings\n" {
		t.Errorf("tenants of an empty outbox: %q", r.stdout)
	}

	for i := range 3 {
		wantOK(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", fmt.Sprintf("welcome:%d", i)))
	}
	var lines []string
	for i := range 2 {
		lines = append(lines, fmt.Sprintf(`{"key":"billing:acme:%d","payload":{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}}`, i, i))
	}
	wantOK(t, sendonce(t, env, strings.Join(lines, "\n")+"\n", "enqueue", "--run", "billing:acme", "--tenant", "acme"))
	wantOK(t, sendonce(t, env, "", "run", "pause", "billing:acme"))
	wantOK(t, sendonce(t, env, "", "tenant", "set", "acme", "--weight", "5", "--quota", "1/d"))
	mustExec(t, pool, `UPDATE sendonce_tenant SET day_start = date_trunc('day', now(), 'UTC'), day_count = 1 WHERE name = 'acme'`)
	mustExec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, tenant)
		SELECT 'beta:' || g, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}', 'beta' FROM generate_series(1, 10005) g`)
	wantOK(t, sendonce(t, env, emailBody("cy@example.com"), "enqueue", "--key", "gamma:1", "--tenant", "gamma"))
	wantOK(t, sendonce(t, env, "", "tenant", "set", "gamma", "--rate", "1/h"))
	mustExec(t, pool, `UPDATE sendonce_tenant SET tokens = 0, refilled_at = now() WHERE name = 'gamma'`)
	wantOK(t, sendonce(t, env, "", "tenant", "set", "zeta", "--weight", "9"))
	mustExec(t, pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, lease_until, tenants, ended_at, end_reason) VALUES
		(1, 1, 'a', 1, now() + interval '1 minute', '{"": 6, "acme": 2, "*": 2}', NULL, NULL),
		(2, 2, 'b', 2, now() + interval '1 minute', NULL, NULL, NULL),
		(3, 3, 'c', 3, now() - interval '1 minute', '{"beta": 1000}', now(), 'stopped')`)

	r := sendonce(t, env, "", "tenants")
	wantOK(t, r)
	want := []string{
		`TENANT +WEIGHT +LIMITS +BACKLOG +SHARE +HELD BY`,
		`default +1 +none +3 transactional +60% \(6\) +-`,
		`acme +5 +1/d \(1 used today\) +2 bulk +20% \(2\) +quota 1/d until 00:00 UTC; paused run billing:acme`,
		`beta +1 +none +10,000\+ transactional +0% +-`,
		`gamma +1 +1/h +1 transactional +0% +rate 1/h`,
		`zeta +9 +none +0 +0% +-`,
		`share: of the 10 intents claimed in the last minute by 1 live worker \(1 more does not say\); 2 of them for tenants beyond each worker's busiest 100, not shown by tenant`,
	}
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("tenants: %d lines, want %d:\n%s", len(got), len(want), r.stdout)
	}
	for i, w := range want {
		if !regexp.MustCompile(`^` + w + ` *$`).MatchString(got[i]) {
			t.Errorf("tenants line %d is %q, want %q", i+1, got[i], w)
		}
	}

	r = sendonce(t, env, "", "tenants", "--json")
	wantOK(t, r)
	var list []struct {
		Tenant  string
		Backlog struct {
			Transactional, Bulk int64
			TransactionalMore   bool
		}
		Share  *float64
		HeldBy []struct {
			Reason string
			Until  *time.Time
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 5 {
		t.Fatalf("tenants --json: %s (%v)", r.stdout, err)
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	acme, beta := list[1], list[2]
	if len(acme.HeldBy) != 2 || acme.HeldBy[0].Reason != "quota_day" || acme.HeldBy[0].Until == nil ||
		!acme.HeldBy[0].Until.Equal(midnight) || acme.HeldBy[1].Reason != "paused_run" || acme.Backlog.Bulk != 2 {
		t.Errorf("tenants --json, acme: %+v (want held by the day's quota until %s, and a paused run)", acme, midnight)
	}
	if beta.Backlog.Transactional != 10_000 || !beta.Backlog.TransactionalMore || beta.Share == nil || *beta.Share != 0 {
		t.Errorf("tenants --json, beta: %+v", beta)
	}
	if list[0].Share == nil || *list[0].Share != 0.6 {
		t.Errorf("tenants --json, default: share %v, want 0.6", list[0].Share)
	}

	r = sendonce(t, env, "", "tenants", "--limit", "2")
	if !strings.Contains(r.stdout, "\nacme ") || strings.Contains(r.stdout, "\nbeta ") || !strings.HasSuffix(r.stdout, "more may follow: --after acme\n") {
		t.Errorf("tenants --limit 2:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "tenants", "--limit", "2", "--after", "acme")
	if !strings.Contains(r.stdout, "\nbeta ") || !strings.Contains(r.stdout, "\ngamma ") || strings.Contains(r.stdout, "acme") ||
		!strings.HasSuffix(r.stdout, "more may follow: --after gamma\n") {
		t.Errorf("tenants --limit 2 --after acme:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "tenants", "--after", "default")
	if strings.Contains(r.stdout, "\ndefault ") || !strings.Contains(r.stdout, "\nacme ") || !strings.Contains(r.stdout, "\nzeta ") {
		t.Errorf("tenants --after default:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "tenant", "show", "acme")
	for _, want := range []string{"backlog:  2 bulk\n", "share:    20% (2) of the intents the live workers claimed in the last minute\n",
		"held by:  quota 1/d until 00:00 UTC; paused run billing:acme\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tenant show acme: %q lacks %q", r.stdout, want)
		}
	}
}

// mustExec runs a statement of the test's setup.
func mustExec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestTenantsPages: sendonce tenants --limit 1, page after page by the
// hint it prints, lists every tenant once, in order, whether a tenant has
// intents of one class, of both or only settings, and says no more after
// the last; also where only one class has tenants left (e, f, g), where
// the tenant paged after is one of the walk's own.
func TestTenantsPages(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	mustExec(t, pool, `INSERT INTO sendonce_run (key, tenant) VALUES ('r:b', 'b'), ('r:d', 'd')`)
	mustExec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, tenant, run_key)
		SELECT k, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}', tenant, run
		FROM (VALUES ('0', NULL, NULL), ('a', 'a', NULL), ('b1', 'b', NULL), ('b2', 'b', 'r:b'), ('c', 'c', NULL), ('d', 'd', 'r:d'),
			('e', 'e', NULL), ('f', 'f', NULL), ('g', 'g', NULL)) v(k, tenant, run)`)
	wantOK(t, sendonce(t, env, "", "tenant", "set", "bb", "--weight", "2"))
	hint := regexp.MustCompile(`(?m)^more may follow: --after (\S+)$`)
	var got []string
	args := []string{"tenants", "--limit", "1"}
	for range 20 {
		r := sendonce(t, env, "", args...)
		wantOK(t, r)
		lines := strings.Split(r.stdout, "\n")
		if len(lines) < 2 {
			t.Fatalf("%s: %q", strings.Join(args, " "), r.stdout)
		}
		got = append(got, strings.Fields(lines[1])[0])
		m := hint.FindStringSubmatch(r.stdout)
		if m == nil {
			break
		}
		args = []string{"tenants", "--limit", "1", "--after", m[1]}
	}
	if want := "default a b bb c d e f g"; strings.Join(got, " ") != want {
		t.Errorf("tenants page by page: %q, want %q", strings.Join(got, " "), want)
	}
}
