package main

import (
	"strings"
	"testing"

	"github.com/sendonce/sendonce/outbox"
)

// TestWordingNamesEveryState: list --state refuses a bad state naming every
// valid one, suppressed included, and its help lists them all too.
func TestWordingNamesEveryState(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	r := sendonce(t, env, "", "list", "--state", "nope")
	wantError(t, r, 2, "unknown --state \"nope\"")
	help := sendonce(t, env, "", "list", "--help")
	status := sendonce(t, env, "", "status", "--help")
	for _, s := range outbox.States {
		if !strings.Contains(r.stderr, string(s)) {
			t.Errorf("list --state nope: %q does not name the state %s", r.stderr, s)
		}
		if !strings.Contains(help.stdout, string(s)) {
			t.Errorf("list --help does not name the state %s:\n%s", s, help.stdout)
		}
		if !strings.Contains(status.stdout, string(s)+",") && !strings.Contains(status.stdout, string(s)+")") {
			t.Errorf("status --help does not list the state %s:\n%s", s, status.stdout)
		}
	}
}

// TestWordingNoSuchRun: the run commands say "no run", never "no intent
// with key run".
func TestWordingNoSuchRun(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	for _, args := range [][]string{
		{"run", "pause", "nope"}, {"run", "resume", "nope"}, {"run", "show", "nope"}, {"run", "cancel", "nope"},
		{"run", "reschedule", "nope", "2030-01-01T00:00:00Z"},
	} {
		r := sendonce(t, env, "", args...)
		wantError(t, r, 1, `no run "nope"`)
		if strings.Contains(r.stderr, "intent") {
			t.Errorf("%s: %q speaks of an intent", strings.Join(args, " "), r.stderr)
		}
	}
	wantError(t, sendonce(t, env, "", "schedule", "remove", "nope"), 1, `no schedule "nope"`)
}
