package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSuppressionCommands(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	r := sendonce(t, env, "", "suppression", "add", "Ada <ADA@example.com>", "bo@example.com", "--source", "ticket 42")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "suppressed 2 of 2 addresses") {
		t.Errorf("add: %q", r.stdout)
	}
	r = sendonce(t, env, "", "suppression", "add", "ada@example.com")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "suppressed 0 of 1 addresses") {
		t.Errorf("add again: %q", r.stdout)
	}
	// A bad address refuses the whole call, naming it.
	wantError(t, sendonce(t, env, "", "suppression", "add", "cy@example.com", "nope"), 1, `"nope" is not an email address`)
	wantError(t, sendonce(t, env, "", "suppression", "add"), 2, "address")
	wantError(t, sendonce(t, env, "", "suppression", "list", "--reason", "spam"), 1, `unknown reason "spam"`)

	r = sendonce(t, env, "", "suppression", "list")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "ada@example.com") || !strings.Contains(r.stdout, "ticket 42") || strings.Contains(r.stdout, "cy@") {
		t.Errorf("list:\n%s", r.stdout)
	}
	wantOK(t, sendonce(t, env, "", "suppression", "remove", "bo@example.com"))
	r = sendonce(t, env, "", "suppression", "list", "--json")
	wantOK(t, r)
	var list []struct{ Address, Reason string }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Address != "ada@example.com" || list[0].Reason != "manual" {
		t.Fatalf("list --json: %s (%v)", r.stdout, err)
	}
	wantError(t, sendonce(t, env, "", "work", "--partly-suppressed", "maybe"), 2, "--partly-suppressed")
}
