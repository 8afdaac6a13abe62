package main

import (
	"regexp"
	"testing"
)

// TestScopeBreakerCommands: breaker set changes a topic's or a tenant's
// thresholds (or the scope's defaults), breakers lists them, resume of one
// that did not trip resumes nothing; a scope of neither kind, a topic of
// the wrong shape and a rate out of range are refused with exit 2.
func TestScopeBreakerCommands(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	r := sendonce(t, env, "", "breakers")
	wantOK(t, r)
	if r.stdout != "no topic or tenant has outcomes counted, settings or a trip\n" {
		t.Errorf("breakers of a new database: %q", r.stdout)
	}
	wantOK(t, sendonce(t, env, "", "breaker", "set", "topic:news", "--bounce-threshold", "3%", "--min-outcomes", "500"))
	wantOK(t, sendonce(t, env, "", "breaker", "set", "tenant:*", "--no-breaker"))
	wantOK(t, sendonce(t, env, "", "breaker", "set", "tenant:default", "--complaint-threshold", "0.2%"))
	r = sendonce(t, env, "", "breakers")
	wantOK(t, r)
	for _, want := range []string{
		`topic:news +3% / 0\.1% after 500 +0 +0 +0 +-\n`,
		`tenant:\* +off +0 +0 +0 +-\n`,
		`tenant:default +5% / 0\.2% after 1000 +0 +0 +0 +-\n`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("breakers: no line %q in\n%s", want, r.stdout)
		}
	}
	r = sendonce(t, env, "", "breaker", "resume", "topic:news")
	wantOK(t, r)
	if r.stdout != "resumed the breaker of topic:news and 0 run(s) it paused\n" {
		t.Errorf("resume of a breaker that did not trip: %q", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "breaker", "set", "team:x"), 2, `"team:x": want topic:NAME or tenant:NAME`)
	wantError(t, sendonce(t, env, "", "breaker", "set", "topic:News!"), 2, `breaker topic`)
	wantError(t, sendonce(t, env, "", "breaker", "set", "topic:news", "--bounce-threshold", "150%"), 2, `--bounce-threshold "150%"`)
}
