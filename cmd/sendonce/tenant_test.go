package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestTenantFlags: --tenant names the tenant of an intent, of a run and
// its members, of a schedule; enqueue, show, list, runs and run show say
// it when there is one; a bad name, the name "default" and a member of
// another tenant than its run's are refused.
func TestTenantFlags(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)

	r := sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:acme:1", "--tenant", "acme")
	wantOK(t, r)
	if !strings.Contains(r.stdout, ", tenant acme)") {
		t.Errorf("enqueue --tenant acme: %q", r.stdout)
	}
	r = sendonce(t, env, emailBody("bo@example.com"), "enqueue", "--key", "invoice:plain:1")
	wantOK(t, r)
	if strings.Contains(r.stdout, "tenant") {
		t.Errorf("enqueue without --tenant speaks of a tenant: %q", r.stdout)
	}
	if r = sendonce(t, env, "", "show", "invoice:acme:1"); !regexp.MustCompile(`tenant: +acme\n`).MatchString(r.stdout) {
		t.Errorf("show of an intent of tenant acme:\n%s", r.stdout)
	}
	if r = sendonce(t, env, "", "show", "invoice:plain:1"); strings.Contains(r.stdout, "tenant") {
		t.Errorf("show of an intent of the default tenant:\n%s", r.stdout)
	}
	for tenant, want := range map[string]string{"acme": "invoice:acme:1", "default": "invoice:plain:1"} {
		r = sendonce(t, env, "", "list", "--tenant", tenant)
		wantOK(t, r)
		if !strings.Contains(r.stdout, want) || strings.Count(r.stdout, "invoice:") != 1 {
			t.Errorf("list --tenant %s:\n%s", tenant, r.stdout)
		}
	}
	wantError(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:x", "--tenant", "Acme"), 2, `invalid tenant: "Acme"`)
	wantError(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:x", "--tenant", "default"), 2, "leave the tenant empty")
	wantError(t, sendonce(t, env, "", "list", "--tenant", "Acme"), 2, `invalid tenant: "Acme"`)

	// A run and its members.
	var lines []string
	for i := range 2 {
		lines = append(lines, fmt.Sprintf(`{"key":"billing:acme:%d","payload":{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}}`, i, i))
	}
	ndjson := strings.Join(lines, "\n") + "\n"
	wantOK(t, sendonce(t, env, ndjson, "enqueue", "--run", "billing:acme", "--tenant", "acme"))
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = 'billing:acme' AND tenant = 'acme'`); n != 2 {
		t.Errorf("%d members of tenant acme, want 2", n)
	}
	other := `{"key":"billing:acme:9","tenant":"beta","payload":{"from":"billing@example.com","to":["c9@example.com"],"subject":"Invoice","text":"x"}}` + "\n"
	wantError(t, sendonce(t, env, other, "enqueue", "--run", "billing:acme"), 1, `names tenant "beta", but its run "billing:acme" is tenant "acme"`)
	if r = sendonce(t, env, "", "runs"); !regexp.MustCompile(`TENANT\n(.*\n)*billing:acme .* acme\n`).MatchString(r.stdout) {
		t.Errorf("runs with a run of tenant acme:\n%s", r.stdout)
	}
	if r = sendonce(t, env, "", "run", "show", "billing:acme"); !regexp.MustCompile(`tenant: +acme\n`).MatchString(r.stdout) {
		t.Errorf("run show of a run of tenant acme:\n%s", r.stdout)
	}

	// A schedule.
	r = sendonce(t, env, "", "schedule", "add", "monthly", "--spec", "0 6 1 * *", "--producer", "invoices", "--tenant", "acme", "--json")
	wantOK(t, r)
	var saved struct{ Tenant string }
	if err := json.Unmarshal([]byte(r.stdout), &saved); err != nil || saved.Tenant != "acme" {
		t.Errorf("schedule add --tenant acme --json: %s (%v)", r.stdout, err)
	}
	wantError(t, sendonce(t, env, "", "schedule", "add", "x", "--spec", "@hourly", "--producer", "p", "--tenant", "a b"), 2, "tenant")
}

// TestRunsWithoutTenants: a list of runs none of which has a tenant is
// the table it was, with no TENANT column.
func TestRunsWithoutTenants(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	line := `{"key":"billing:1","payload":{"from":"billing@example.com","to":["c@example.com"],"subject":"Invoice","text":"x"}}` + "\n"
	wantOK(t, sendonce(t, env, line, "enqueue", "--run", "billing"))
	r := sendonce(t, env, "", "runs")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "KEY ") || strings.Contains(r.stdout, "TENANT") {
		t.Errorf("runs without tenants:\n%s", r.stdout)
	}
}
