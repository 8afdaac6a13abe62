package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testAPIKey is recognisable, so a test can prove it never leaks.
const testAPIKey = "oe_test_LEAKCHECK_7d41c9e2"

// result is what one run of the command did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// sendonce runs the command in-process with the given environment (and
// nothing of the test process's own) and stdin.
func sendonce(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, mapEnv(env), strings.NewReader(stdin), &out, &errb)
	r := result{code, out.String(), errb.String()}
	wantNoLeak(t, "sendonce "+strings.Join(args, " "), r)
	return r
}

// wantNoLeak fails the test if a secret shows in what a run printed: the
// API key, a UI token (uiSecret) or a database password, which the tests
// make recognisable by LEAKCHECK.
func wantNoLeak(t *testing.T, what string, r result) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, "LEAKCHECK") {
		t.Errorf("%s: a secret leaked:\n%s", what, r)
	}
}

func mapEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// dbEnv is the environment of a command run against dbURL. It carries the
// API key to every command, so that sendonce can check none prints it.
func dbEnv(dbURL string) map[string]string {
	return map[string]string{"DATABASE_URL": dbURL, "SENDONCE_LOG_FORMAT": "text", "OPENEMAIL_API_KEY": testAPIKey}
}

// newDBEnv makes a migrated database for the test and returns its URL and
// the environment of a command run against it.
func newDBEnv(t *testing.T) (dbURL string, env map[string]string) {
	t.Helper()
	dbURL = pgtest.NewDBURL(t)
	return dbURL, dbEnv(dbURL)
}

// wantOK fails unless r exited 0.
func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0, got %s", r)
	}
}

// wantError checks the error contract: exit code, nothing on stdout, and
// exactly one line on stderr, "sendonce: ..." naming the problem.
func wantError(t *testing.T, r result, code int, mentions ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\n%s", r.code, code, r)
	}
	if r.stdout != "" {
		t.Errorf("stdout not empty: %q", r.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "sendonce: ") || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr is not one line starting \"sendonce: \": %q", r.stderr)
	}
	for _, m := range mentions {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("stderr %q does not mention %q", r.stderr, m)
		}
	}
}

// count runs a count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// poolFor connects to dbURL for the length of the test.
func poolFor(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// emptyDatabase creates a database with no migrations applied, dropped at
// the end of the test, and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	return pgtest.CreateDB(t, pgtest.ServerURL(t), "cmd")
}

// running is a `sendonce work` running in-process.
type running struct {
	t      *testing.T
	base   string // http://host:port of its listener
	cancel context.CancelFunc
	done   chan int
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	res    *result
}

var startLine = regexp.MustCompile(`(?m)^sendonce work: .* http=(\S+) `)

// startWork runs `sendonce work` in-process until stop (or the test's
// end), and waits for its startup line.
func startWork(t *testing.T, env map[string]string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &running{t: t, cancel: cancel, done: make(chan int, 1), stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	go func() {
		w.done <- run(ctx, append([]string{"work"}, args...), mapEnv(env), strings.NewReader(""), w.stdout, w.stderr)
	}()
	t.Cleanup(func() {
		w.stop()
		if t.Failed() {
			t.Logf("work's stderr:\n%s", w.stderr)
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		if m := startLine.FindStringSubmatch(w.stdout.String()); m != nil {
			w.base = m[1]
			return w
		}
		select {
		case code := <-w.done:
			w.done <- code
			t.Fatalf("work exited %d before starting\nstdout: %s\nstderr: %s", code, w.stdout, w.stderr)
		case <-deadline:
			t.Fatalf("work did not start\nstdout: %s\nstderr: %s", w.stdout, w.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stop cancels work's context, as SIGINT/SIGTERM do, and returns what it
// did.
func (w *running) stop() result {
	w.t.Helper()
	if w.res != nil {
		return *w.res
	}
	w.cancel()
	select {
	case code := <-w.done:
		w.res = &result{code, w.stdout.String(), w.stderr.String()}
		wantNoLeak(w.t, "work", *w.res)
	case <-time.After(60 * time.Second):
		w.t.Fatalf("work did not stop\nstderr: %s", w.stderr)
	}
	return *w.res
}

// get fetches path from work's listener.
func (w *running) get(path string, header ...string) (int, string, http.Header) {
	w.t.Helper()
	return httpGet(w.t, w.base+path, header...)
}

func httpGet(t *testing.T, u string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

// emailBody is an email intent's payload with a marker in its text, so a
// test can prove bodies are not logged.
func emailBody(to string) string {
	return fmt.Sprintf(`{"from":"billing@example.com","to":%q,"subject":"Invoice","text":"BODYMARKER private content"}`, to)
}
