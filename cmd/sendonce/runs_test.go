package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestRunCommands enqueues a run from NDJSON (twice: idempotent as a
// whole), then lists, shows, pauses, resumes, reschedules and cancels it,
// and checks bad input is refused with nothing written.
func TestRunCommands(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf(`{"key":"invoice:2026-12:%d","payload":{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}}`, i, i))
	}
	ndjson := strings.Join(lines, "\n") + "\n"

	r := sendonce(t, env, ndjson, "enqueue", "--run", "billing:2026-12", "--json")
	wantOK(t, r)
	var out runOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Created || out.Enqueued != 3 {
		t.Fatalf("enqueue --run: %s (%v), want a new run of 3", r.stdout, err)
	}
	r = sendonce(t, env, ndjson, "enqueue", "--run", "billing:2026-12")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "0 members new, 3 already there") {
		t.Errorf("second enqueue --run: %q", r.stdout)
	}

	// A bad line is refused, naming it, and nothing of the file is written.
	bad := ndjson + `{"key":"invoice:2026-12:9","payload":{"from":"billing@example.com","subject":"no recipient","text":"x"}}` + "\n"
	wantError(t, sendonce(t, env, bad, "enqueue", "--run", "billing:2026-12"), 1, "line 4", "recipient")
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 3 {
		t.Fatalf("%d intents after a refused file, want 3", n)
	}
	wantError(t, sendonce(t, env, ndjson, "enqueue", "--run", "billing:2026-12", "--key", "x"), 2, "--run")

	r = sendonce(t, env, "", "runs")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "billing:2026-12") || !strings.Contains(r.stdout, "active") {
		t.Errorf("runs:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "run", "pause", "billing:2026-12")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "paused run billing:2026-12") || !regexp.MustCompile(`pending: +3\n`).MatchString(r.stdout) {
		t.Errorf("run pause:\n%s", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "run", "pause", "billing:2026-12"), 1, "paused")
	wantOK(t, sendonce(t, env, "", "run", "resume", "billing:2026-12"))
	r = sendonce(t, env, "", "run", "reschedule", "billing:2026-12", "2030-01-02T08:00:00Z")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "3 members held until 2030-01-02") {
		t.Errorf("run reschedule: %q", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "run", "reschedule", "billing:2026-12", "tomorrow"), 2, "RFC 3339")
	r = sendonce(t, env, "", "run", "cancel", "billing:2026-12", "--json")
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"canceled": 3`) {
		t.Errorf("run cancel: %s", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "run", "show", "nope:1"), 1, "nope:1")
	wantError(t, sendonce(t, env, "", "run", "show"), 2, "run key")
}

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	sql := filepath.Join(t.TempDir(), "digest.sql")
	if err := os.WriteFile(sql, []byte(`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key) SELECT $1 || ':1', 'email', '{}', $1`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := sendonce(t, env, "", "schedule", "add", "digest", "--spec", "0 8 * * MON Europe/Berlin", "--sql-file", sql)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "saved schedule digest: next occurrence") {
		t.Errorf("schedule add: %q", r.stdout)
	}
	r = sendonce(t, env, "", "schedule", "list")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "0 8 * * MON Europe/Berlin") || !strings.Contains(r.stdout, "late") {
		t.Errorf("schedule list:\n%s", r.stdout)
	}
	// A failing schedule says so (issue 22), as the workers record it.
	pool := poolFor(t, dbURL)
	pgtest.Exec(t, pool, `UPDATE sendonce_schedule SET failures = 2, last_error = 'occurrence 2030-01-07T07:00:00Z: ERROR: relation "users" does not exist',
		failed_at = '2030-01-07T07:00:10Z', retry_at = '2030-01-07T07:00:30Z'`)
	r = sendonce(t, env, "", "schedule", "list")
	wantOK(t, r)
	if !strings.Contains(r.stdout, `2× (next try 2030-01-07T07:00:30Z): occurrence 2030-01-07T07:00:00Z: ERROR: relation "users" does not exist`) {
		t.Errorf("schedule list of a failing schedule:\n%s", r.stdout)
	}
	if r = sendonce(t, env, "", "schedule", "list", "--json"); !strings.Contains(r.stdout, `"failures": 2`) || !strings.Contains(r.stdout, `"lastError"`) {
		t.Errorf("schedule list --json of a failing schedule:\n%s", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "schedule", "add", "x", "--spec", "0 8 * * MON Mars/Olympus", "--sql-file", sql), 2, "Mars/Olympus")
	wantError(t, sendonce(t, env, "", "schedule", "add", "x", "--spec", "@hourly"), 2, "--sql-file")
	wantError(t, sendonce(t, env, "", "schedule", "add", "bad name", "--spec", "@hourly", "--producer", "p"), 2, "name")
	wantOK(t, sendonce(t, env, "", "schedule", "remove", "digest"))
	wantError(t, sendonce(t, env, "", "schedule", "remove", "digest"), 1, "digest")
}

// TestRunCommandsFitTheState: `run cancel` of a run whose members are all
// sent is refused (it used to turn the run "canceled"), with the run left
// done; `runs` and `run show` say done; a reschedule into the past is
// refused, naming the time, and "now" lets the members go; a paused run's
// `run show` says it is paused, not that nothing was sent lately.
func TestRunCommandsFitTheState(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	pool := poolFor(t, dbURL)
	enqueue := func(run string, n int) {
		var lines []string
		for i := range n {
			lines = append(lines, fmt.Sprintf(`{"key":"%s:%d","payload":{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}}`, run, i, i))
		}
		wantOK(t, sendonce(t, env, strings.Join(lines, "\n")+"\n", "enqueue", "--run", run))
	}
	enqueue("billing:done", 40)
	enqueue("billing:later", 3)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, sent_at = now(), message_id = 'msg_' || id
		WHERE run_key = 'billing:done'`)

	r := sendonce(t, env, "", "runs")
	wantOK(t, r)
	if !regexp.MustCompile(`billing:done +done +40 +40 `).MatchString(r.stdout) {
		t.Errorf("runs does not say billing:done is done:\n%s", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "run", "cancel", "billing:done"), 1,
		"it is done", "every one of its 40 members is settled (40 sent)", "nothing is left to cancel")
	r = sendonce(t, env, "", "run", "show", "billing:done")
	wantOK(t, r)
	if !regexp.MustCompile(`state: +done\n`).MatchString(r.stdout) || !strings.Contains(r.stdout, "none, done") {
		t.Errorf("run show after the refused cancel:\n%s", r.stdout)
	}

	wantError(t, sendonce(t, env, "", "run", "reschedule", "billing:later", "2025-12-08T09:00:00Z"), 2,
		"2025-12-08T09:00:00Z is in the past")
	r = sendonce(t, env, "", "run", "reschedule", "billing:later", "2030-01-02T08:00:00Z")
	wantOK(t, r)
	r = sendonce(t, env, "", "run", "show", "billing:later")
	wantOK(t, r)
	if !regexp.MustCompile(`time left: +not started: the run's send time is 2030-01-02`).MatchString(r.stdout) {
		t.Errorf("run show of a run held until 2030:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "run", "reschedule", "billing:later", "now")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "3 members due now") {
		t.Errorf("run reschedule now: %q", r.stdout)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = 'billing:later' AND send_at <= now()`); n != 3 {
		t.Errorf("%d members due after reschedule now, want 3", n)
	}

	wantOK(t, sendonce(t, env, "", "run", "pause", "billing:later"))
	r = sendonce(t, env, "", "run", "show", "billing:later")
	wantOK(t, r)
	if !regexp.MustCompile(`time left: +paused: 3 members wait until sendonce run resume billing:later`).MatchString(r.stdout) ||
		strings.Contains(r.stdout, "nothing sent in the last minute") {
		t.Errorf("run show of a paused run:\n%s", r.stdout)
	}
}
