package main

import (
	"strings"
	"testing"
)

// TestWorkUnsubscribeSettings: --unsubscribe-url wants its secret from
// SENDONCE_UNSUBSCRIBE_SECRET and the public --webhook-addr listener; a
// bad secret (current or previous) or URL is refused before anything
// starts, naming the variable, never the value.
func TestWorkUnsubscribeSettings(t *testing.T) {
	t.Parallel()
	const good = "unsub-LEAKCHECK-0123456789"
	for _, tt := range []struct {
		name     string
		env      map[string]string
		args     []string
		mentions []string
	}{
		{"no secret", nil, []string{"--webhook-addr", "127.0.0.1:0"}, []string{"--unsubscribe-url", "SENDONCE_UNSUBSCRIBE_SECRET"}},
		{"no listener", map[string]string{"SENDONCE_UNSUBSCRIBE_SECRET": good}, nil, []string{"--unsubscribe-url", "--webhook-addr"}},
		{"short secret", map[string]string{"SENDONCE_UNSUBSCRIBE_SECRET": "LEAKCHECK"}, []string{"--webhook-addr", "127.0.0.1:0"},
			[]string{"9 characters", "at least 16", "SENDONCE_UNSUBSCRIBE_SECRET"}},
		{"short previous", map[string]string{"SENDONCE_UNSUBSCRIBE_SECRET": good, "SENDONCE_UNSUBSCRIBE_SECRET_PREVIOUS": "LEAKCHECK-x"},
			[]string{"--webhook-addr", "127.0.0.1:0"}, []string{"previous", "SENDONCE_UNSUBSCRIBE_SECRET_PREVIOUS"}},
	} {
		env := dbEnv("")
		env["OPENEMAIL_WEBHOOK_SECRET"] = "whsec_test"
		for k, v := range tt.env {
			env[k] = v
		}
		args := append([]string{"work", "--unsubscribe-url", "https://mail.example.com"}, tt.args...)
		r := sendonce(t, env, "", args...) // sendonce fails the test on a leak of LEAKCHECK
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", tt.name, r.code, r)
		}
		for _, m := range tt.mentions {
			if !strings.Contains(r.stderr, m) {
				t.Errorf("%s: stderr lacks %q:\n%s", tt.name, m, r.stderr)
			}
		}
	}
	env := dbEnv("")
	env["OPENEMAIL_WEBHOOK_SECRET"] = "whsec_test"
	env["SENDONCE_UNSUBSCRIBE_SECRET"] = good
	r := sendonce(t, env, "", "work", "--webhook-addr", "127.0.0.1:0", "--unsubscribe-url", "ftp://mail.example.com")
	if r.code != 2 || !strings.Contains(r.stderr, "want https://") {
		t.Errorf("ftp URL: %s", r)
	}
}

// TestSuppressionTopic: suppression add/list/remove --topic unsubscribe,
// list and resubscribe one topic, leaving the global list alone.
func TestSuppressionTopic(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	wantOK(t, sendonce(t, env, "", "suppression", "add", "Ada <Ada@Example.com>", "bo@example.com", "--topic", "digest", "--source", "ticket 7"))
	r := sendonce(t, env, "", "suppression", "add", "ada@example.com", "--topic", "digest")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "suppressed 0 of 1") {
		t.Errorf("add again: %s", r.stdout)
	}
	r = sendonce(t, env, "", "suppression", "list", "--topic", "digest")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "ada@example.com") || !strings.Contains(r.stdout, "ticket 7") || strings.Count(r.stdout, "digest") != 2 {
		t.Errorf("list --topic digest:\n%s", r.stdout)
	}
	if r := sendonce(t, env, "", "suppression", "list"); strings.Contains(r.stdout, "ada@example.com") {
		t.Errorf("the global list holds a topic unsubscribe:\n%s", r.stdout)
	}
	r = sendonce(t, env, "", "suppression", "remove", "ada@example.com", "--topic", "digest")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "removed 1 of 1") {
		t.Errorf("remove: %s", r.stdout)
	}
	if r := sendonce(t, env, "", "suppression", "list", "--topic", "digest"); strings.Contains(r.stdout, "ada@example.com") {
		t.Errorf("ada still unsubscribed:\n%s", r.stdout)
	}
	if r := sendonce(t, env, "", "suppression", "list", "--topic", "Digest"); r.code == 0 || !strings.Contains(r.stderr, "topic") {
		t.Errorf("a bad topic: %s", r)
	}
}

// TestEnqueueTopic: enqueue --topic sets an intent's topic, and a run's
// for its members; a bad topic is refused naming the field.
func TestEnqueueTopic(t *testing.T) {
	t.Parallel()
	_, env := newDBEnv(t)
	body := `{"from":"news@example.com","to":["ada@example.com"],"subject":"D","text":"Hi."}`
	r := sendonce(t, env, body, "enqueue", "--key", "digest:1", "--topic", "digest", "--json")
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"topic": "digest"`) {
		t.Errorf("enqueue --topic: %s", r.stdout)
	}
	r = sendonce(t, env, `{"key":"d:2","payload":`+body+`}`+"\n"+`{"key":"d:3","topic":"news","payload":`+body+`}`+"\n",
		"enqueue", "--run", "digest:w1", "--topic", "digest")
	wantOK(t, r)
	for key, want := range map[string]string{"d:2": `"topic": "digest"`, "d:3": `"topic": "news"`} {
		if r := sendonce(t, env, "", "show", key, "--json"); !strings.Contains(r.stdout, want) {
			t.Errorf("show %s: want %s in\n%s", key, want, r.stdout)
		}
	}
	r = sendonce(t, env, body, "enqueue", "--key", "digest:4", "--topic", "Digest")
	if r.code != 2 || !strings.Contains(r.stderr, "invalid topic") {
		t.Errorf("a bad topic: %s", r)
	}
}
