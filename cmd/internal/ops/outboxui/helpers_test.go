package outboxui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/cmd/internal/ops/outboxui"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/ops/httpserver"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// harness is an outbox over a fresh database with the page in front of
// it, on a real HTTP server, and the page's log.
type harness struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	ob   *outbox.Outbox
	srv  *httptest.Server
	logs *syncbuf.Buffer
	fake *fakeapi.Server
	auth string // the Authorization header requests carry
}

type setup struct {
	actions bool
	token   string          // the UI token (SENDONCE_UI_TOKEN)
	auth    string          // what requests carry as Authorization
	worker  bool            // run a real worker against a fake API
	faults  []fakeapi.Fault // the fake API's faults
	// webhookAddr is where the page says this process takes webhooks.
	webhookAddr string
	// maxAttempts and retryBase are the worker's (0: its defaults); the
	// page is told maxAttempts.
	maxAttempts int
	retryBase   time.Duration
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, ob := outboxtest.New(t)
	h := &harness{t: t, ctx: ctx, pool: pool, ob: ob, logs: &syncbuf.Buffer{}, auth: s.auth}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(h.logs, t.Output()), nil))
	page, err := outboxui.New(pool, ob, outboxui.Options{Actions: s.actions, RiverUI: httpserver.UIPrefix, Logger: log,
		WebhookAddr: s.webhookAddr, MaxAttempts: s.maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(httpserver.New(httpserver.Options{OutboxUI: page, UIToken: s.token}))
	t.Cleanup(h.srv.Close)
	if s.worker {
		h.fake = fakeapi.NewTest(t, fakeapi.Config{Faults: s.faults})
		c, err := client.New(client.WithAPIKey("oe_test_ui0000000000000"), client.WithBaseURL(h.fake.URL()), client.WithMaxRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 10, Logger: log,
			FetchPollInterval: 100 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
			Send: worker.SendConfig{MaxAttempts: s.maxAttempts, RetryBase: s.retryBase}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
	}
	return h
}

// email is an email payload to addr with subject.
func email(addr, subject string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"from": "billing@example.com", "to": []string{addr}, "subject": subject,
		"text": "BODYTEXT of " + subject, "html": "<p>BODYHTML</p>"})
	return b
}

// enqueue enqueues intents in one transaction.
func (h *harness) enqueue(in ...outbox.Intent) {
	h.t.Helper()
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.ob.EnqueueMany(h.ctx, tx, in)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// fail parks an intent as a worker's drain would after a 422 (certain)
// or, with uncertain, after a 5xx whose first attempt was firstAgo ago:
// its one try spent, no River job.
func (h *harness) fail(key, lastError string, uncertain bool, firstAgo time.Duration) {
	h.t.Helper()
	tag, err := h.pool.Exec(h.ctx, `UPDATE sendonce_outbox SET state = 'failed', attempts = 1, tries = 1, uncertain = $2,
			first_attempt_at = now() - $3 * interval '1 second', last_error = $4, updated_at = now()
		WHERE idempotency_key = $1 AND job_id IS NULL`, key, uncertain, firstAgo.Seconds(), lastError)
	if err != nil || tag.RowsAffected() != 1 {
		h.t.Fatalf("fail %s: %v (%d rows)", key, err, tag.RowsAffected())
	}
}

// do makes a request to the page, with the harness's Authorization, and
// returns the status and body; redirects are not followed.
func (h *harness) do(method, path string, form url.Values, header ...string) (int, string) {
	h.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(h.ctx, method, h.srv.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if h.auth != "" {
		req.Header.Set("Authorization", h.auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1] // the Host header is the request's, not a header's
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if loc := resp.Header.Get("Location"); loc != "" {
		return resp.StatusCode, "Location: " + loc
	}
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the form token from the confirmation page of action on key.
func (h *harness) csrf(action, key string) string {
	h.t.Helper()
	code, body := h.do("GET", "/outbox/"+action+"?key="+url.QueryEscape(key), nil)
	m := csrfField.FindStringSubmatch(body)
	if code != 200 || m == nil {
		h.t.Fatalf("GET /outbox/%s: %d, no form token:\n%s", action, code, body)
	}
	return m[1]
}

func (h *harness) get(key string) *outbox.Record { return outboxtest.Get(h.t, h.ob, key) }

func (h *harness) jobs() int {
	return outboxtest.Value[int](h.t, h.pool, `SELECT count(*) FROM river_job`)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func keys(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i+1)
	}
	return out
}
