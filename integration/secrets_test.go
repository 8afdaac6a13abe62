package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// malformedKey is an API key of the wrong form. A command that refuses it
// must not print it either.
const malformedKey = "sk_live_SECRETmalformedK3y4c1d9e0b7a"

// uiTokenSecret is a UI token's secret: refused on the command line, taken
// from a file, presented right and wrong to the listener; never printed.
const uiTokenSecret = "uiSECRETt0kenN0tForPrint1ng4c7e1a"

// secretNeedles are the forms in which a key must never appear.
func secretNeedles() []string {
	return []string{apiKey, apiKeySecret, malformedKey, strings.TrimPrefix(malformedKey, "sk_live_"), uiTokenSecret}
}

// TestSecrets runs sendonce where a careless program would print its API
// key: requests the API refuses (401 for a key it does not know), a
// malformed key, a key bound for plain http off this machine, debug logs,
// failures stored in the outbox and River's job errors, every inspect
// command with and without --json. Then it reads everything every process
// of the whole run printed (stdout and stderr) and every row every scenario
// left in its database, and requires that the key appears nowhere. A UI
// token gets the same treatment (uiTokenNeverShown).
// TestMain scans once more at the very end, so scenarios that ran after
// this one are covered too.
func TestSecrets(t *testing.T) {
	setup(t)
	start := time.Now()
	ctx := context.Background()
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "secrets")

	// A fake that knows another key: ours gets 401 invalid_api_key.
	stranger := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{"oe_test_someoneElseEntirely"}, Seed: seedFor("secrets-401")})
	e := processEnv(dbURL, stranger)
	intents := []intent{
		emailIntent("secrets:1", "s1@example.test"),
		emailIntent("secrets:2", "s2@example.test"),
		emailIntent("secrets:3", "s3@example.test"),
		emailIntent("secrets:4", "s4@example.test"),
	}
	for _, in := range intents {
		mustRun(t, "enqueue-json", e, strings.NewReader(string(in.Payload)), "enqueue", "--key", in.Key, "--json")
	}

	// Commands that must refuse to start, with a key in hand.
	refusals := []struct {
		name string
		env  env
	}{
		{"malformed key", env{DatabaseURL: dbURL, APIKey: malformedKey, BaseURL: stranger.URL()}},
		{"no key", env{DatabaseURL: dbURL, BaseURL: stranger.URL()}},
		{"plain http off this machine", env{DatabaseURL: dbURL, APIKey: apiKey, BaseURL: "http://api.example.test"}},
	}
	for _, r := range refusals {
		p := startWorker(t, "worker-"+strings.ReplaceAll(r.name, " ", "-"), r.env, workerOptions{Concurrency: 1, LogLevel: "debug"})
		select {
		case <-p.done:
			if code := exitCode(p.err); code == 0 {
				t.Errorf("work with %s: exit 0, want a refusal", r.name)
			}
			t.Logf("work with %s: refused: %s", r.name, strings.TrimSpace(tail(p.stderr.String(), 300)))
		case <-time.After(5 * time.Second):
			// Not refused at start: then it must refuse each send, and say
			// so without the key. Wait until it has tried one.
			waitFor(t, 30*time.Second, "an attempt by the worker with "+r.name, func() (bool, string) {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE attempts > 0`).Scan(&n)
				return err == nil && n > 0, fmt.Sprint(n, err)
			})
			p.kill()
			var lastErr string
			_ = pool.QueryRow(ctx, `SELECT coalesce(max(last_error), '') FROM sendonce_outbox`).Scan(&lastErr)
			t.Logf("work with %s: starts anyway (not refused at start); a send's error reads: %s", r.name, lastErr)
		}
	}

	w := startWorker(t, "worker-401", e, workerOptions{Concurrency: 2, LogLevel: "debug"})
	waitFor(t, 60*time.Second, "the intents to fail with 401", func() (bool, string) {
		o, err := outboxStates(ctx, pool)
		return err == nil && o["failed"] == len(intents), fmt.Sprint(o, err)
	})
	w.stop(t)
	if n := len(stranger.Requests()); n == 0 {
		t.Fatalf("the worker made no request: nothing was put to the test")
	}

	// Every inspect command, both ways, on failed intents.
	inspect := func(phase string) {
		for _, args := range [][]string{
			{"status"}, {"status", "--json"},
			{"list"}, {"list", "--json"}, {"list", "--state", "failed", "--json"}, {"list", "--state", "sent"},
			{"show", "secrets:1"}, {"show", "secrets:1", "--json"},
		} {
			mustRun(t, phase+"-"+args[0], e, nil, args...)
		}
	}
	inspect("failed")
	run(t, "cancel-failed", e, nil, "cancel", "secrets:2") // refused: it was attempted; the message must not leak either

	// Now a fake that knows our key, with faults, and retry the failed
	// intents: sends, retries, replays, all in debug logs.
	friend := newFake(t, "secrets", mustFaults(t, "error_before=503;times=1", "drop_after;times=1;to=s2@", "rate_limit;times=1;to=s3@")...)
	e2 := processEnv(dbURL, friend)
	for _, in := range intents {
		mustRun(t, "retry", e2, nil, "retry", in.Key)
	}
	w2 := startWorker(t, "worker-ok", e2, workerOptions{Concurrency: 2, LogLevel: "debug", APITimeout: time.Second, RateLimitWait: time.Second})
	waitAllSent(t, pool, len(intents), 60*time.Second, nil)
	w2.stop(t)
	inspect("sent")
	l := checkLedger(friend, intents, loadBatches(t, pool))
	l.report(t)
	uiTokenNeverShown(t, e2)

	// The scan: this scenario's rows now, every earlier scenario's rows
	// (kept when their databases were dropped), and every process's output.
	dumpDatabase(t, pool, "secrets")
	if leaks := scanForSecrets(allCaptures()); len(leaks) > 0 {
		for _, leak := range leaks {
			t.Errorf("a secret leaked: %s", leak)
		}
	}
	// The scan must be able to find a key where there is one.
	probe := &capture{name: "probe"}
	probe.Write([]byte("Authorization: Bearer " + apiKey))
	if len(scanForSecrets([]*capture{probe})) != 1 {
		t.Fatalf("the secrets scan cannot find a key in plain sight")
	}

	all := allCaptures()
	bytes, processes, dumps := 0, 0, 0
	for _, c := range all {
		bytes += len(c.String())
		switch {
		case strings.HasSuffix(c.name, " stdout"):
			processes++
		case strings.HasSuffix(c.name, "database dump"):
			dumps++
		}
	}
	summary(t, "secrets: seed=%d processes=%d streams=%d bytes=%d database_dumps=%d leaks=%d elapsed=%s",
		suite.seed, processes, len(all)-dumps, bytes, dumps, len(scanForSecrets(all)), time.Since(start).Round(time.Second))
}

// uiTokenNeverShown runs work with a UI token where a careless program
// would print it: on the command line (refused, without repeating it), and
// from --ui-token-file with debug logs while the listener gets requests
// with no token, a wrong one, the right one and a foreign Host. The
// captures of both go to the scan.
func uiTokenNeverShown(t *testing.T, e env) {
	t.Helper()
	if r := run(t, "work-ui-token-flag", e, nil, "work", "--ui-token", "ops:"+uiTokenSecret); r.code != 2 ||
		!strings.Contains(r.stderr, "SENDONCE_UI_TOKEN") {
		t.Errorf("work --ui-token: exit %d, want 2 naming SENDONCE_UI_TOKEN\n%s", r.code, r.stderr)
	}
	file := filepath.Join(t.TempDir(), "ui-token")
	if err := os.WriteFile(file, []byte("ops:"+uiTokenSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(workerArgs(t, workerOptions{Concurrency: 1, LogLevel: "debug"}), "--http-addr=127.0.0.1:0", "--ui-token-file", file)
	p := startProc(t, "worker-ui-token-file", e, args...)
	var base string
	waitFor(t, 30*time.Second, "the worker's start line", func() (bool, string) {
		if !p.running() {
			t.Fatalf("work with --ui-token-file exited: %v\n%s", p.err, p.output())
		}
		m := regexp.MustCompile(` http=(\S+) `).FindStringSubmatch(p.stdout.String())
		if m != nil {
			base = m[1]
		}
		return m != nil, p.stdout.String()
	})
	for _, tc := range []struct {
		path, auth, host string
		want             int
	}{
		{"/outbox/", "", "", 401},
		{"/outbox/", "Bearer wrong-" + uiTokenSecret[:8], "", 401},
		{"/outbox/", "Bearer " + uiTokenSecret, "", 200},
		{"/riverui/api/jobs", "Bearer " + uiTokenSecret, "", 200},
		{"/riverui/api/jobs", "Bearer " + uiTokenSecret, "sendonce.ops.example", 200},
		{"/outbox/intents", "Bearer " + uiTokenSecret + "x", "attacker.example", 401},
	} {
		req, _ := http.NewRequest("GET", base+tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s (Host %q, %d chars of Authorization): %d, want %d", tc.path, tc.host, len(tc.auth), resp.StatusCode, tc.want)
		}
	}
	p.stop(t)
}

// scanAllForSecrets scans everything captured in the run.
func scanAllForSecrets() []string { return scanForSecrets(allCaptures()) }

// scanForSecrets returns where any secret appears in the captures.
func scanForSecrets(cs []*capture) []string {
	var leaks []string
	for _, c := range cs {
		text := c.String()
		for _, needle := range secretNeedles() {
			if i := strings.Index(text, needle); i >= 0 {
				lo, hi := max(0, i-80), min(len(text), i+len(needle)+40)
				leaks = append(leaks, fmt.Sprintf("%s: …%s…", c.name, strings.ReplaceAll(text[lo:hi], "\n", "⏎")))
				break
			}
		}
	}
	return leaks
}
