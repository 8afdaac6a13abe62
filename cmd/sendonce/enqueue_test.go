package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/outbox"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)

	r := sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:inv_1")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "enqueued invoice:inv_1 (id ") || !strings.Contains(r.stdout, "state pending") {
		t.Errorf("stdout %q", r.stdout)
	}

	// The same intent again: a no-op that says so, and exits 0.
	r = sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:inv_1")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "already enqueued invoice:inv_1 ") {
		t.Errorf("stdout %q", r.stdout)
	}

	// From a file, with --json, a template with a send time.
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"from":"news@example.com","to":["bob@example.com"],"props":{"n":1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = sendonce(t, env, "", "enqueue", "--key", "digest:1", "--kind", "template", "--template", "weekly",
		"--send-at", "2030-01-02T08:00:00Z", "--file", file, "--json")
	wantOK(t, r)
	var out enqueueOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if out.AlreadyEnqueued || out.Intent.Key != "digest:1" || out.Intent.Kind != outbox.KindTemplate ||
		out.Intent.TemplateID != "weekly" || out.Intent.SendAt == nil || out.Intent.SendAt.Year() != 2030 {
		t.Errorf("--json: %+v", out.Intent)
	}
	r = sendonce(t, env, "", "enqueue", "--key", "digest:1", "--kind", "template", "--template", "weekly",
		"--send-at", "2030-01-02T08:00:00Z", "--file", file, "--json")
	wantOK(t, r)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.AlreadyEnqueued {
		t.Errorf("--json again: %v %s", err, r.stdout)
	}

	// Two intents, each a row on the drain (pending, no River job of its
	// own, checked, on the worker's queue), and no River job at all.
	pool := poolFor(t, dbURL)
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 2 {
		t.Errorf("%d intents, want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE state = 'pending' AND job_id IS NULL AND checked AND queue = 'sendonce'`); n != 2 {
		t.Errorf("%d intents pending on the drain (no job, checked, queue sendonce), want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Errorf("%d river jobs, want none: the drain sends enqueued intents", n)
	}
}

func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	// One intent already there, for the key-reuse case.
	wantOK(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "taken"))

	missingFile := filepath.Join(t.TempDir(), "nope.json")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		stdin    string
		args     []string
		code     int
		mentions []string
	}{
		{"malformed JSON", env, `{"from":`, []string{"--key", "k1"}, 1, []string{"body from stdin", "malformed JSON"}},
		{"not an object", env, `[1,2]`, []string{"--key", "k1"}, 1, []string{"body from stdin", "payload"}},
		{"empty body", env, ``, []string{"--key", "k1"}, 1, []string{"no body"}},
		{"missing recipient", env, `{"from":"a@example.com","text":"x"}`, []string{"--key", "k1"}, 1, []string{"payload.to"}},
		{"missing content", env, `{"from":"a@example.com","to":"b@example.com"}`, []string{"--key", "k1"}, 1, []string{"html"}},
		{"missing file", env, ``, []string{"--key", "k1", "--file", missingFile}, 1, []string{"nope.json"}},
		{"key reused", env, emailBody("someone-else@example.com"), []string{"--key", "taken"}, 1, []string{"taken", "idempotency_key_reuse"}},
		{"missing key", env, emailBody("a@example.com"), nil, 2, []string{"--key is required"}},
		{"bad key", env, emailBody("a@example.com"), []string{"--key", "has space"}, 2, []string{"invalid key", "has space"}},
		{"unknown kind", env, emailBody("a@example.com"), []string{"--key", "k1", "--kind", "fax"}, 2, []string{"--kind", "fax"}},
		{"template without id", env, emailBody("a@example.com"), []string{"--key", "k1", "--kind", "template"}, 2, []string{"--template"}},
		{"template id on email", env, emailBody("a@example.com"), []string{"--key", "k1", "--template", "t"}, 2, []string{"--template"}},
		{"bad send-at", env, emailBody("a@example.com"), []string{"--key", "k1", "--send-at", "tomorrow"}, 2, []string{"--send-at", "RFC 3339"}},
		{"unknown flag", env, emailBody("a@example.com"), []string{"--key", "k1", "--bogus"}, 2, []string{"bogus"}},
		{"stray argument", env, emailBody("a@example.com"), []string{"--key", "k1", "extra"}, 2, []string{"no arguments"}},
		{"no database", map[string]string{}, emailBody("a@example.com"), []string{"--key", "k1"}, 2, []string{"DATABASE_URL"}},
		{"unreachable database", map[string]string{"DATABASE_URL": "postgres://app:Pa55wordXYZ@127.0.0.1:1/app?sslmode=disable"},
			emailBody("a@example.com"), []string{"--key", "k1"}, 1, []string{"cannot connect to the database"}},
		{"bad log level", env, emailBody("a@example.com"), []string{"--key", "k1", "--log-level", "loud"}, 2, []string{"--log-level"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sendonce(t, tc.env, tc.stdin, append([]string{"enqueue"}, tc.args...)...)
			wantError(t, r, tc.code, tc.mentions...)
			if strings.Contains(r.stderr, "Pa55wordXYZ") {
				t.Errorf("the database password leaked: %q", r.stderr)
			}
		})
	}

	// Nothing was written by any of them: still the one intent, and no
	// River job (the drain sends it; bad input must not have added one).
	pool := poolFor(t, dbURL)
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 1 {
		t.Errorf("%d intents after bad input, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Errorf("%d river jobs after bad input, want none", n)
	}
	r := sendonce(t, env, "", "list", "--json")
	wantOK(t, r)
	var recs []outbox.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Key != "taken" {
		t.Errorf("intents after bad input: %+v", recs)
	}
}
