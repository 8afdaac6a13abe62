package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestShowListStatusCancelRetry(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	for _, key := range []string{"a:1", "a:2", "a:3"} {
		wantOK(t, sendonce(t, env, emailBody(strings.ReplaceAll(key, ":", "")+"@example.com"), "enqueue", "--key", key))
	}

	// show
	r := sendonce(t, env, "", "show", "a:1")
	wantOK(t, r)
	for _, want := range []string{"key:", "a:1", "state:", "pending", "payload:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in %q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "BODYMARKER") {
		t.Errorf("show without --json printed the message body: %q", r.stdout)
	}
	r = sendonce(t, env, "", "show", "a:1", "--json")
	wantOK(t, r)
	var rec outbox.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.Key != "a:1" || rec.State != outbox.StatePending {
		t.Errorf("show --json: %v %s", err, r.stdout)
	}
	wantError(t, sendonce(t, env, "", "show", "nope:1"), 1, `no intent with key "nope:1"`)
	wantError(t, sendonce(t, env, "", "show"), 2, "show needs one argument")

	// cancel
	r = sendonce(t, env, "", "cancel", "a:2", "--json")
	wantOK(t, r)
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.State != outbox.StateCanceled {
		t.Errorf("cancel --json: %v %s", err, r.stdout)
	}
	wantError(t, sendonce(t, env, "", "cancel", "a:2"), 1, "cannot cancel", "already canceled")
	wantError(t, sendonce(t, env, "", "cancel", "nope:1"), 1, "no intent with key")

	// status
	r = sendonce(t, env, "", "status", "--json")
	wantOK(t, r)
	var st statusOutput
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v %s", err, r.stdout)
	}
	if st.Counts[outbox.StatePending] != 2 || st.Counts[outbox.StateCanceled] != 1 || st.Counts[outbox.StateSent] != 0 ||
		st.OldestPendingSeconds <= 0 {
		t.Errorf("status --json: %+v", st)
	}
	r = sendonce(t, env, "", "status")
	wantOK(t, r)
	for _, want := range []string{"pending", "canceled", "oldest pending"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status: no %q in %q", want, r.stdout)
		}
	}
	// The fleet's send budget, as the workers left it: paced at 8/s of a
	// configured 10/s after two 429s, paused by a Retry-After.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_rate_budget (key_fingerprint, ceiling, rate, throttles, paused_until)
		VALUES ('sha256:0123456789ab', 10, 8, 2, now() + interval '1 minute')`)
	r = sendonce(t, env, "", "status")
	wantOK(t, r)
	for _, want := range []string{"send budget sha256:0123456789ab", "8/s of the configured 10/s", "lowered 2 times", "paused for"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status: no %q in %q", want, r.stdout)
		}
	}
	r = sendonce(t, env, "", "status", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Budgets) != 1 || st.Budgets[0].Rate != 8 || st.Budgets[0].PausedFor <= 0 {
		t.Errorf("status --json budgets: %v %s", err, r.stdout)
	}

	// list
	r = sendonce(t, env, "", "list", "--state", "pending", "--json")
	wantOK(t, r)
	var recs []outbox.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 2 || recs[0].Key != "a:1" || recs[1].Key != "a:3" {
		t.Errorf("list --state pending --json: %v %s", err, r.stdout)
	}
	r = sendonce(t, env, "", "list", "--limit", "1", "--after", "0")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "a:1") || strings.Contains(r.stdout, "a:3") || !strings.Contains(r.stdout, "--after") {
		t.Errorf("list --limit 1: %q", r.stdout)
	}
	r = sendonce(t, env, "", "list", "--state", "failed", "--json")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty list --json: %q", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "list", "--state", "lost"), 2, `unknown --state "lost"`)
	wantError(t, sendonce(t, env, "", "list", "--limit", "0"), 2, "--limit")

	// retry: only failed intents; an uncertain one past its replay window
	// only with --force, which warns and is recorded.
	wantError(t, sendonce(t, env, "", "retry", "a:1"), 1, "cannot retry", "pending")
	ctx := context.Background()
	// a:1 was refused by the API (certain: nothing delivered); a:3 had an
	// attempt with an unknown outcome 25 hours ago.
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'failed', attempts = 1, first_attempt_at = now(),
		last_error = '422 validation_error: bad address (param to)' WHERE idempotency_key = 'a:1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'failed', attempts = 3, uncertain = true,
		first_attempt_at = now() - interval '25 hours', last_error = '503 api_error: unavailable; gave up after 3 attempts'
		WHERE idempotency_key = 'a:3'`); err != nil {
		t.Fatal(err)
	}
	r = sendonce(t, env, "", "retry", "a:1")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "retried a:1 ") || r.stderr != "" {
		t.Errorf("retry a:1: %s", r)
	}
	wantError(t, sendonce(t, env, "", "retry", "a:3"), 1, "cannot retry", "second time", "--force")
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = 'a:3' AND state = 'failed'`); n != 1 {
		t.Errorf("a refused retry changed the intent")
	}
	if r := sendonce(t, env, "", "show", "a:3"); !strings.Contains(r.stdout, "uncertain:") {
		t.Errorf("show of an uncertain intent does not say so: %q", r.stdout)
	}
	// No window longer than the API's 24 h is accepted.
	wantError(t, sendonce(t, env, "", "retry", "a:3", "--replay-window", "48h"), 2, "--replay-window")
	r = sendonce(t, env, "", "retry", "a:3", "--force", "--json")
	wantOK(t, r)
	var ro retryOutput
	if err := json.Unmarshal([]byte(r.stdout), &ro); err != nil || !ro.Forced || ro.Intent.State != outbox.StatePending ||
		ro.Intent.ForcedRetryAt == nil || ro.Intent.FirstAttemptAt != nil {
		t.Errorf("retry --force --json: %v %s", err, r.stdout)
	}
	if !strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, "retried with --force") ||
		!strings.Contains(r.stderr, "key=a:3") || !strings.Contains(r.stderr, "second time") {
		t.Errorf("retry --force: no warning on stderr: %q", r.stderr)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'pending'`); n != 2 {
		t.Errorf("%d pending after the retries, want 2", n)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dbURL := emptyDatabase(t)
	env := dbEnv(dbURL)
	env[`OPENEMAIL_API_KEY`] = testAPIKey

	// Before migrating, the other commands say what to do.
	wantError(t, sendonce(t, env, "", "status"), 1, "sendonce migrate")
	wantError(t, sendonce(t, env, "", "work", "--http-addr", ""), 1, "needs migrating", "sendonce migrate")

	r := sendonce(t, env, "", "migrate")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "applied ") || !strings.Contains(r.stdout, "River migrations") || !strings.Contains(r.stdout, "sendonce migrations") {
		t.Errorf("first migrate: %q", r.stdout)
	}
	// The numbers skipped are said to be retired, not missing.
	if !regexp.MustCompile(`sendonce migrations 1-11, 13-20, 22-\d+ \(no 12 or 21: numbers retired, never used; nothing is missing\)\n$`).MatchString(r.stdout) {
		t.Errorf("first migrate: %q, want sendonce's versions as runs, the gaps explained", r.stdout)
	}
	r = sendonce(t, env, "", "migrate")
	wantOK(t, r)
	if r.stdout != "already up to date\n" {
		t.Errorf("second migrate: %q", r.stdout)
	}
	wantOK(t, sendonce(t, env, "", "status"))
}

// TestStatusScheduledIsNotOldestPending: intents waiting for their send_at
// are pending, but none is due, and status says so rather than "none".
func TestStatusScheduledIsNotOldestPending(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	wantOK(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "later:1", "--send-at", "2030-01-02T08:00:00Z"))
	r := sendonce(t, env, "", "status")
	wantOK(t, r)
	if !regexp.MustCompile(`(?m)^oldest pending +none due \(the pending intents are scheduled later\)$`).MatchString(r.stdout) {
		t.Errorf("status with one intent scheduled in 2030 does not say none is due:\n%s", r.stdout)
	}
}
