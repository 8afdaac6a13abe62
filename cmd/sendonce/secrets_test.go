package main

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// uiSecret is a UI token's secret the leak check (wantNoLeak) looks for.
const uiSecret = "ui-LEAKCHECK-5b0e"

// TestWorkRefusesUITokenOnTheCommandLine: a token given as --ui-token is
// in every user's `ps` (and /proc/PID/cmdline) for as long as the worker
// runs, so work refuses it before anything starts, names the two places a
// token can come from instead, and never repeats the token.
func TestWorkRefusesUITokenOnTheCommandLine(t *testing.T) {
	t.Parallel()
	env := dbEnv("") // no database: the refusal comes before any connection
	for _, args := range [][]string{
		{"--ui-token", "ops:" + uiSecret},
		{"--ui-token=" + uiSecret},
		{"--http-addr", "0.0.0.0:0", "--ui-token", uiSecret},
		{"--ui-token", ""},
	} {
		r := sendonce(t, env, "", append([]string{"work"}, args...)...)
		wantError(t, r, 2, "--ui-token", "ps", "SENDONCE_UI_TOKEN", "--ui-token-file")
	}
	r := sendonce(t, env, "", "work", "--help")
	wantOK(t, r)
	for _, want := range []string{"--ui-token-file", "SENDONCE_UI_TOKEN", "SENDONCE_UI_TOKEN_FILE"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("work --help does not mention %s", want)
		}
	}
}

// TestWorkUITokenFromAFile: --ui-token-file (or SENDONCE_UI_TOKEN_FILE)
// names a file holding the token(s), as a secrets mount provides them;
// the trailing newline does not count. A missing or empty file, or a token
// from both the file and SENDONCE_UI_TOKEN, is refused, naming the file
// but never its content.
func TestWorkUITokenFromAFile(t *testing.T) {
	t.Parallel()
	_, _, env := newWorkEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ui-token")
	if err := os.WriteFile(file, []byte("ops:"+uiSecret+",bob:"+uiSecret+"-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, how := range []string{"flag", "env"} {
		args := append(fastArgs, "--http-addr", "0.0.0.0:0", "--ui-actions")
		wenv := maps.Clone(env)
		if how == "flag" {
			args = append(args, "--ui-token-file", file)
		} else {
			wenv["SENDONCE_UI_TOKEN_FILE"] = file
		}
		w := startWork(t, wenv, args...)
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
		base := "http://127.0.0.1:" + port
		if code, _, _ := httpGet(t, base+"/outbox/"); code != 401 {
			t.Errorf("%s: /outbox/ without the token: %d, want 401", how, code)
		}
		if code, body, _ := httpGet(t, base+"/outbox/", "Authorization", "Bearer "+uiSecret+"-b"); code != 200 || !strings.Contains(body, "actions on · bob") {
			t.Errorf("%s: /outbox/ with bob's token from the file: %d\n%.500s", how, code, body)
		}
		if code, _, _ := httpGet(t, base+"/riverui/api/jobs", "Authorization", "Bearer "+uiSecret); code != 200 {
			t.Errorf("%s: /riverui/api/jobs with ops's token from the file: %d, want 200", how, code)
		}
		wantOK(t, w.stop()) // and wantNoLeak: the token is in no output
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	both := maps.Clone(env)
	both["SENDONCE_UI_TOKEN"] = uiSecret
	for _, tc := range []refusal{
		{"missing file", env, []string{"--ui-token-file", filepath.Join(dir, "nope")}, 2, []string{"--ui-token-file", "nope"}},
		{"empty file", env, []string{"--ui-token-file", empty}, 2, []string{"--ui-token-file", "empty"}},
		{"file and variable", both, []string{"--ui-token-file", file}, 2, []string{"SENDONCE_UI_TOKEN", "--ui-token-file", "not both"}},
		{"a directory", env, []string{"--ui-token-file", dir}, 2, []string{"--ui-token-file"}},
	} {
		r := sendonce(t, tc.env, "", append([]string{"work", "--http-addr", "0.0.0.0:0"}, tc.args...)...)
		wantError(t, r, tc.code, tc.mentions...)
	}
}

// TestDatabaseURLPasswordNotOnTheCommandLine: a --database-url that carries
// a password shows it in ps, so every command warns, pointing at
// DATABASE_URL, PGPASSWORD and the password file, without repeating it,
// and then goes on (psql's and River's convention); a --database-url
// without a password gets no warning.
func TestDatabaseURLPasswordNotOnTheCommandLine(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://app:pw-LEAKCHECK@127.0.0.1:1/app?connect_timeout=5",
		"postgresql://app:pw-LEAKCHECK@127.0.0.1:1/app?sslmode=disable&connect_timeout=5",
		"postgres://app@127.0.0.1:1/app?password=pw-LEAKCHECK&connect_timeout=5",
		"host=127.0.0.1 port=1 user=app password=pw-LEAKCHECK dbname=app connect_timeout=5",
	} {
		for _, args := range [][]string{{"status", "--database-url", dsn}, {"migrate", "--database-url=" + dsn}, {"--database-url", dsn, "work"}} {
			if args[0] == "work" || args[len(args)-1] == "work" {
				continue // work would wait for the database; status and migrate show the rule
			}
			r := sendonce(t, nil, "", args...)
			if r.code != 1 {
				t.Errorf("%v: exit %d, want 1 (the connection refused)\n%s", args[0], r.code, r)
			}
			for _, m := range []string{"WARN", "--database-url holds a password", "ps", "DATABASE_URL", "PGPASSWORD", "cannot connect"} {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("%v: stderr %q does not mention %q", args[0], r.stderr, m)
				}
			}
			if strings.Contains(r.stderr+r.stdout, "LEAKCHECK") {
				t.Errorf("%v: the password was printed: %q", args[0], r.stderr)
			}
		}
	}
	// Without a password: tried, and the connection refused, with no warning.
	r := sendonce(t, nil, "", "status", "--database-url", "postgres://app@127.0.0.1:1/app?connect_timeout=5")
	wantError(t, r, 1, "cannot connect")
	if strings.Contains(r.stderr, "holds a password") {
		t.Errorf("a URL without a password was warned about: %q", r.stderr)
	}
	// In the environment, a password is fine: only this user (and root) can
	// read a process's environment.
	r = sendonce(t, map[string]string{"DATABASE_URL": "postgres://app:pw-LEAKCHECK@127.0.0.1:1/app?connect_timeout=5"}, "", "status")
	wantError(t, r, 1, "cannot connect")
}
