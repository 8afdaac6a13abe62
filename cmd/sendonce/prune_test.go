package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"0": 0, "30d": 30 * 24 * time.Hour, "1y": 365 * 24 * time.Hour, "36h": 36 * time.Hour, "90s": 90 * time.Second} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1d", "30", "d", "1.5d", "-5m", "999999999999y"} {
		if _, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) did not fail", in)
		}
	}
	r := retention(30 * 24 * time.Hour)
	if r.String() != "30d" {
		t.Errorf("30 days print as %q", r.String())
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	dbURL, env := newDBEnv(t)
	wantOK(t, sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:p1"))
	pool := poolFor(t, dbURL)
	if _, err := pool.Exec(t.Context(), `UPDATE sendonce_outbox SET state = 'sent'`); err != nil {
		t.Fatal(err)
	}
	// Within the default 30 days: nothing goes.
	r := sendonce(t, env, "", "prune")
	wantOK(t, r)
	if r.stdout != "pruned 0 intents, 0 events, 0 batches, 0 runs, 0 tombstones, 0 unsubscribe events\n" {
		t.Errorf("prune: stdout %q", r.stdout)
	}
	env["SENDONCE_RETAIN"] = "0"
	r = sendonce(t, env, "", "prune")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "pruned 1 intents,") {
		t.Errorf("prune with SENDONCE_RETAIN=0: stdout %q", r.stdout)
	}
	// The pruned key answers from its tombstone.
	r = sendonce(t, env, emailBody("ada@example.com"), "enqueue", "--key", "invoice:p1")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "already enqueued invoice:p1 (kind email, state sent, pruned ") {
		t.Errorf("enqueue of a pruned key: stdout %q", r.stdout)
	}
	wantError(t, sendonce(t, env, emailBody("bob@example.com"), "enqueue", "--key", "invoice:p1"), 1, "invoice:p1", "idempotency_key_reuse")
	r = sendonce(t, env, "", "show", "invoice:p1")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "state:   sent") || !strings.Contains(r.stdout, "only the key's tombstone is kept") {
		t.Errorf("show of a pruned key: stdout %q", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "show", "invoice:never"), 1, "invoice:never")

	wantError(t, sendonce(t, env, "", "prune", "--retain", "a while"), 2, "--retain", "30d")
	wantError(t, sendonce(t, env, "", "work", "--retain", "-1d"), 2, "--retain")
}
