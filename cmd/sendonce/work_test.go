package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// workEnv is the environment of a worker against dbURL and the fake.
func workEnv(dbURL string, fake *fakeapi.Server) map[string]string {
	env := dbEnv(dbURL)
	env["OPENEMAIL_BASE_URL"] = fake.URL()
	return env
}

// newWorkEnv makes a migrated database and a fake API for the test and
// returns the database's URL, the fake and the environment of a worker
// against both.
func newWorkEnv(t *testing.T) (dbURL string, fake *fakeapi.Server, env map[string]string) {
	t.Helper()
	dbURL = pgtest.NewDBURL(t)
	fake = fakeapi.NewTest(t, fakeapi.Config{})
	return dbURL, fake, workEnv(dbURL, fake)
}

// withEnv is a copy of env with the variable k set to v.
func withEnv(env map[string]string, k, v string) map[string]string {
	env = maps.Clone(env)
	env[k] = v
	return env
}

// refusal is a way to start work wrong: under env, with args, it exits
// code with a message naming every one of mentions.
type refusal struct {
	name     string
	env      map[string]string
	args     []string
	code     int
	mentions []string
}

// wantWorkRefused runs `sendonce work --http-addr "" args...` under env and
// wants it refused up front: exit 2, naming every one of mentions. A
// worker that took the value would run until stopped: the deadline stops
// it, and the exit code tells.
func wantWorkRefused(t *testing.T, env map[string]string, args []string, mentions ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"work", "--http-addr", ""}, args...), mapEnv(env), strings.NewReader(""), &out, &errb)
	wantError(t, result{code, out.String(), errb.String()}, 2, mentions...)
}

// wantDurationRefused checks that work refuses flag (a duration) negative,
// zero, and the environment variable envVar set to envValue (the subtest
// envCase), each with a message naming flag and want.
func wantDurationRefused(t *testing.T, flag, envVar, envValue, envCase, want string) {
	t.Helper()
	_, _, base := newWorkEnv(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"negative", base, []string{flag, "-1s"}},
		{"zero", base, []string{flag, "0"}},
		{envCase, withEnv(base, envVar, envValue), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWorkRefused(t, tc.env, tc.args, flag, want)
		})
	}
}

// fastArgs make a test worker quick to notice work and to stop.
var fastArgs = []string{"--http-addr", "127.0.0.1:0", "--fetch-poll-interval", "50ms", "--sweep-interval", "50ms",
	"--shutdown-grace", "10s", "--log-level", "debug"}

// metricValue finds one sample in an exposition, or "" when absent.
func metricValue(exposition, series string) string {
	for l := range strings.SplitSeq(exposition, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

func TestWorkSendsAndServesOperations(t *testing.T) {
	t.Parallel()
	dbURL, fake, env := newWorkEnv(t)
	pool := poolFor(t, dbURL)

	var outputs []result
	for i := range 3 {
		r := sendonce(t, env, emailBody(fmt.Sprintf("user%d@example.com", i)), "enqueue", "--key", fmt.Sprintf("e2e:%d", i))
		wantOK(t, r)
		outputs = append(outputs, r)
	}

	w := startWork(t, env, fastArgs...)
	if !regexp.MustCompile(`^sendonce work: queue=sendonce concurrency=100 http=http://127\.0\.0\.1:\d+ api=127\.0\.0\.1:\d+ api-rate=from-429s coalesce=off webhooks=off retain=off poll-only=false pooler=none\n` +
		`sendonce work: the outbox page: http://127\.0\.0\.1:\d+/outbox/\n$`).MatchString(w.stdout.String()) {
		t.Errorf("startup lines: %q", w.stdout.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fake.WaitDeliveries(ctx, 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "three intents sent", func() bool {
		return count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == 3
	})
	for _, d := range fake.Deliveries() {
		if !strings.HasPrefix(d.IdempotencyKey, "e2e:") {
			t.Errorf("delivery with key %q, want the intent's key", d.IdempotencyKey)
		}
	}

	// Probes.
	if code, body, _ := w.get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body, _ := w.get("/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}

	// Metrics: names and values. The observer runs just after the row is
	// marked sent, so poll for the last count.
	var exp string
	eventually(t, 10*time.Second, "sends_total to reach 3", func() bool {
		_, exp, _ = w.get("/metrics")
		return metricValue(exp, `sendonce_sends_total{kind="email",result="sent"}`) == "3"
	})
	for series, want := range map[string]string{
		`sendonce_sends_total{kind="email",result="failed"}`:         "0",
		`sendonce_replays_total`:                                     "0",
		`sendonce_retries_total`:                                     "0",
		`sendonce_api_requests_total{code="200",method="post"}`:      "3",
		`sendonce_api_request_duration_seconds_count{method="post"}`: "3",
		`sendonce_api_call_duration_seconds_count{kind="email"}`:     "3",
		`sendonce_outbox_intents{state="sent"}`:                      "3",
		`sendonce_outbox_intents{state="pending"}`:                   "0",
		`sendonce_outbox_oldest_pending_age_seconds`:                 "0",
	} {
		if got := metricValue(exp, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if metricValue(exp, name) == "" {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// The outbox page, at the URL work printed, read-only without
	// --ui-actions. No token on loopback.
	if m := regexp.MustCompile(`(?m)^sendonce work: the outbox page: (\S+)$`).FindStringSubmatch(w.stdout.String()); m == nil || m[1] != w.base+"/outbox/" {
		t.Errorf("work printed the outbox page as %q, want %q", m, w.base+"/outbox/")
	}
	if code, body, _ := w.get("/outbox/"); code != 200 || !strings.Contains(body, `<span class="n">3</span><span class="l">sent</span>`) ||
		!strings.Contains(body, "read-only") {
		t.Errorf("/outbox/: %d %.1000q", code, body)
	}

	// The River UI and its API. No token on loopback.
	if code, body, _ := w.get("/riverui/", "Accept", "text/html"); code != 200 || !strings.Contains(strings.ToLower(body), "<html") {
		t.Errorf("/riverui/: %d %.200q", code, body)
	}
	code, body, _ := w.get("/riverui/api/jobs?state=completed")
	var jobs struct {
		Data []json.RawMessage `json:"data"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &jobs) != nil {
		t.Errorf("/riverui/api/jobs: %d %.200q", code, body)
	}
	if code, body, _ := w.get("/riverui/api/queues"); code != 200 || !strings.Contains(body, `"sendonce"`) {
		t.Errorf("/riverui/api/queues: %d %.300q", code, body)
	}

	r := w.stop()
	wantOK(t, r)
	if !strings.Contains(r.stderr, "shutting down") || !strings.Contains(r.stderr, "stopped") {
		t.Errorf("shutdown not logged:\n%s", r.stderr)
	}

	// Secrets: the API key never appears, nor (even at debug level) a
	// message body.
	outputs = append(outputs, r)
	for _, o := range outputs {
		if strings.Contains(o.stdout+o.stderr, "LEAKCHECK") {
			t.Errorf("the API key leaked:\n%s", o)
		}
		if strings.Contains(o.stderr, "BODYMARKER") {
			t.Errorf("a message body was logged:\n%s", o.stderr)
		}
	}
}

func TestWorkFinishesSendsInFlightOnShutdown(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDBURL(t)
	faults, err := fakeapi.ParseFaults("latency=700ms:key=slow")
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: faults})
	env := workEnv(dbURL, fake)
	pool := poolFor(t, dbURL)
	wantOK(t, sendonce(t, env, emailBody("slow@example.com"), "enqueue", "--key", "slow:1"))

	w := startWork(t, env, append(fastArgs, "--http-addr", "")...)
	eventually(t, 30*time.Second, "the send to reach the API", func() bool {
		return len(fake.Requests()) > 0
	})
	r := w.stop() // the request is in flight: the API answers after 700 ms
	wantOK(t, r)
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`); n != 1 {
		t.Errorf("the send in flight was not finished: %d sent\n%s", n, r.stderr)
	}
	if n := len(fake.Deliveries()); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
}

func TestWorkRefusesToStart(t *testing.T) {
	t.Parallel()
	_, _, base := newWorkEnv(t)
	with := func(k, v string) map[string]string { return withEnv(base, k, v) }
	for _, tc := range []refusal{
		{"no API key", with("OPENEMAIL_API_KEY", ""), nil, 1, []string{"OPENEMAIL_API_KEY is not set"}},
		{"invalid API key", with("OPENEMAIL_API_KEY", "sk_LEAKCHECK_123"), nil, 1, []string{"OPENEMAIL_API_KEY", "oe_live_"}},
		{"non-loopback without a token", base, []string{"--http-addr", "0.0.0.0:0"}, 2, []string{"--ui-token", "not loopback"}},
		{"every interface without a token", base, []string{"--http-addr", ":9464"}, 2, []string{"--ui-token"}},
		{"rescue before timeout", base, []string{"--job-timeout", "1m", "--rescue-after", "30s"}, 2, []string{"--rescue-after"}},
		{"zero concurrency", base, []string{"--concurrency", "0"}, 2, []string{"--concurrency"}},
		{"window past the API's", base, []string{"--replay-window", "48h"}, 2, []string{"--replay-window", "24h"}},
		{"attempts River would discard", base, []string{"--max-attempts", "100"}, 2, []string{"--max-attempts", "99"}},
		{"zero rate", base, []string{"--api-rate", "0"}, 2, []string{"--api-rate", `"0"`}},
		{"negative rate", base, []string{"--api-rate", "-1/s"}, 2, []string{"--api-rate", "1 or more"}},
		{"unknown unit", base, []string{"--api-rate", "10/fortnight"}, 2, []string{"--api-rate", `unit "fortnight"`}},
		{"not a rate", with("SENDONCE_API_RATE", "abc"), nil, 2, []string{"--api-rate", `"abc"`}},
		{"bad env value", with("SENDONCE_CONCURRENCY", "lots"), nil, 2, []string{"SENDONCE_CONCURRENCY"}},
		{"bad duration", base, []string{"--job-timeout", "soon"}, 2, []string{"job-timeout"}},
		{"no database", with("DATABASE_URL", ""), nil, 2, []string{"DATABASE_URL"}},
		{"webhooks without a secret", base, []string{"--webhook-addr", "127.0.0.1:0"}, 2, []string{"--webhook-addr", "OPENEMAIL_WEBHOOK_SECRET"}},
		{"webhooks from the environment without a secret", with("SENDONCE_WEBHOOK_ADDR", "127.0.0.1:0"), nil, 2, []string{"OPENEMAIL_WEBHOOK_SECRET"}},
		{"webhooks with a blank secret", with("OPENEMAIL_WEBHOOK_SECRET", " , "), []string{"--webhook-addr", "127.0.0.1:0"}, 2, []string{"OPENEMAIL_WEBHOOK_SECRET"}},
		{"plain http off loopback", with("OPENEMAIL_BASE_URL", "http://fake-api:8025"), nil, 1, []string{"plain http", "fake-api"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sendonce(t, tc.env, "", append([]string{"work"}, tc.args...)...)
			wantError(t, r, tc.code, tc.mentions...)
			if strings.Contains(r.stderr, "LEAKCHECK") {
				t.Errorf("the API key leaked: %q", r.stderr)
			}
		})
	}

	// An address already taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wantError(t, sendonce(t, base, "", "work", "--http-addr", ln.Addr().String()), 1, "--http-addr")
}

func TestWorkUITokenOffLoopback(t *testing.T) {
	t.Parallel()
	_, _, env := newWorkEnv(t)
	env["SENDONCE_UI_TOKEN"] = "ops:ui-S3CRET"
	env["SENDONCE_UI_ACTIONS"] = "true"
	w := startWork(t, env, append(fastArgs, "--http-addr", "0.0.0.0:0")...)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
	base := "http://127.0.0.1:" + port

	if code, _, h := httpGet(t, base+"/riverui/", "Accept", "text/html"); code != 401 || h.Get("WWW-Authenticate") == "" {
		t.Errorf("/riverui/ without the token: %d", code)
	}
	if code, _, _ := httpGet(t, base+"/riverui/api/jobs"); code != 401 {
		t.Errorf("/riverui/api/jobs without the token: %d", code)
	}
	if code, _, _ := httpGet(t, base+"/riverui/api/jobs", "Authorization", "Bearer wrong"); code != 401 {
		t.Errorf("/riverui/api/jobs with a wrong token: %d", code)
	}
	if code, _, _ := httpGet(t, base+"/riverui/api/jobs", "Authorization", "Bearer ui-S3CRET"); code != 200 {
		t.Errorf("/riverui/api/jobs with the token: %d", code)
	}
	// The outbox page: the same rule, and the token's name for who acts.
	for _, auth := range []string{"", "Bearer wrong", "Bearer ops:ui-S3CRET"} {
		if code, body, h := httpGet(t, base+"/outbox/", "Authorization", auth); code != 401 || h.Get("WWW-Authenticate") == "" || strings.Contains(body, "Overview") {
			t.Errorf("/outbox/ with %q: %d", auth, code)
		}
	}
	if code, body, _ := httpGet(t, base+"/outbox/", "Authorization", "Bearer ui-S3CRET"); code != 200 || !strings.Contains(body, "actions on · ops") {
		t.Errorf("/outbox/ with the token and SENDONCE_UI_ACTIONS: %d\n%.1000s", code, body)
	}
	if code, body, _ := httpGet(t, "http://x:ui-S3CRET@127.0.0.1:"+port+"/riverui/", "Accept", "text/html"); code != 200 || !strings.Contains(strings.ToLower(body), "<html") {
		t.Errorf("/riverui/ with basic auth: %d", code)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, _ := httpGet(t, base+p); code != 200 {
			t.Errorf("%s needs no token, got %d", p, code)
		}
	}
	r := w.stop()
	wantOK(t, r)
	if strings.Contains(r.stdout+r.stderr, "ui-S3CRET") {
		t.Errorf("the UI token leaked:\n%s", r)
	}
}
