package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
)

// httpDo makes a real request to u with host as its Host header, and the
// headers given; redirects are not followed.
func httpDo(t *testing.T, method, u, host, body string, header ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, u, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWorkRefusesAForeignHostWithoutToken is issue 22's DNS rebinding
// against the real `sendonce work`: no UI token, loopback listener, and
// a page of attacker.example whose name now resolves to 127.0.0.1. Its
// requests carry "Host: attacker.example:PORT" and a matching Origin, so
// the cross-origin check takes them for the same origin. None may read the
// outbox page or the River UI's API, nor cancel or delete through them;
// the operator's requests on a loopback name still work.
func TestWorkRefusesAForeignHostWithoutToken(t *testing.T) {
	t.Parallel()
	dbURL, _, env := newWorkEnv(t)
	pool := poolFor(t, dbURL)
	const key = "password-reset:user_7:token_abc"
	body := `{"from":"accounts@example.com","to":"ada@example.com","subject":"Reset your password","text":"https://app.example.com/reset?t=RESETLINK-4f9a2c"}`
	wantOK(t, sendonce(t, env, body, "enqueue", "--key", key, "--send-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	// The drain sends enqueued intents without a River job; the forged
	// requests need one to read, cancel and delete through the River UI, one
	// whose args name the key. The intent is given a job of its own, held
	// until its send time, as a database upgraded from a release before the
	// drain holds.
	outboxtest.GiveJobs(t, pool, key)
	var jobID int64
	if err := pool.QueryRow(t.Context(), `SELECT job_id FROM sendonce_outbox WHERE idempotency_key = $1`, key).Scan(&jobID); err != nil {
		t.Fatal(err)
	}

	w := startWork(t, env, append(fastArgs, "--ui-actions")...)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
	_, page, _ := w.get("/outbox/cancel?key=" + url.QueryEscape(key))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token on the confirmation page:\n%.1000s", page)
	}
	csrf := m[1] // as if the attacker had read it too
	form := url.Values{"key": {key}, "csrf": {csrf}}.Encode()
	ids := fmt.Sprintf(`{"ids":["%d"]}`, jobID)
	requests := []struct{ method, path, body, contentType string }{
		{"GET", "/outbox/", "", ""},
		{"GET", "/outbox/intent?key=" + url.QueryEscape(key), "", ""},
		{"GET", "/outbox/cancel?key=" + url.QueryEscape(key), "", ""},
		{"POST", "/outbox/cancel", form, "application/x-www-form-urlencoded"},
		{"GET", "/riverui/", "", ""},
		{"GET", "/riverui/api/jobs?state=scheduled", "", ""},
		{"GET", fmt.Sprintf("/riverui/api/jobs/%d", jobID), "", ""},
		{"POST", "/riverui/api/jobs/cancel", ids, "application/json"},
		{"POST", "/riverui/api/jobs/delete", ids, "application/json"},
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example"} {
		for _, rq := range requests {
			code, got := httpDo(t, rq.method, w.base+rq.path, host, rq.body, "Origin", "http://"+host,
				"Sec-Fetch-Site", "same-origin", "Content-Type", rq.contentType, "Accept", "text/html")
			if code != http.StatusForbidden || strings.Contains(got, "RESETLINK") || strings.Contains(got, "password-reset") {
				t.Errorf("%s %s with Host %s: %d, want 403 and nothing read\n%.300s", rq.method, rq.path, host, code, got)
			}
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = $1 AND state = 'pending'`, key); n != 1 {
		t.Errorf("after the forged requests the intent is no longer pending")
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'scheduled'`, jobID); n != 1 {
		t.Errorf("after the forged requests the River job is no longer scheduled")
	}
	// The probes and /metrics answer any Host: a scraper may name the
	// machine as it likes, and they read nothing of an intent.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := httpDo(t, "GET", w.base+p, "attacker.example:"+port, ""); code != 200 {
			t.Errorf("GET %s with a foreign Host: %d, want 200", p, code)
		}
	}

	// The operator, on loopback names.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		if code, got := httpDo(t, "GET", w.base+fmt.Sprintf("/riverui/api/jobs/%d", jobID), host, ""); code != 200 || !strings.Contains(got, "scheduled") {
			t.Errorf("GET the River job with Host %s: %d %.300s", host, code, got)
		}
		if code, got := httpDo(t, "GET", w.base+"/outbox/intent?key="+url.QueryEscape(key), host, ""); code != 200 || !strings.Contains(got, "RESETLINK") {
			t.Errorf("GET the intent with Host %s: %d %.300s", host, code, got)
		}
	}
	host := "localhost:" + port
	if code, got := httpDo(t, "POST", w.base+"/outbox/cancel", host, form, "Origin", "http://"+host, "Sec-Fetch-Site", "same-origin",
		"Content-Type", "application/x-www-form-urlencoded"); code != http.StatusSeeOther {
		t.Errorf("the operator's cancel: %d %.300s", code, got)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = $1 AND state = 'canceled'`, key); n != 1 {
		t.Errorf("the operator's cancel did not cancel the intent")
	}
	wantOK(t, w.stop())
}

// TestOutboxPageURL: the URL work prints for its outbox page is the
// listener's address with /outbox/, and a listener on every address is
// named localhost, which a browser on the machine can open.
func TestOutboxPageURL(t *testing.T) {
	for addr, want := range map[string]string{
		"http://127.0.0.1:9464": "http://127.0.0.1:9464/outbox/",
		"http://[::1]:9464":     "http://[::1]:9464/outbox/",
		"http://0.0.0.0:9464":   "http://localhost:9464/outbox/",
		"http://[::]:9464":      "http://localhost:9464/outbox/",
		"http://10.0.0.7:9464":  "http://10.0.0.7:9464/outbox/",
		"http://ops.example:80": "http://ops.example:80/outbox/",
	} {
		if got := outboxPageURL(addr); got != want {
			t.Errorf("outboxPageURL(%q) = %q, want %q", addr, got, want)
		}
	}
}
