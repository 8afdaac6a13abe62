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
