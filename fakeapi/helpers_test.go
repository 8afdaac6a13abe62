package fakeapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// testKey is an API key the fake accepts; the tests talk to the fake with
// plain net/http, as any client would.
const testKey = "oe_test_4f3c2a"

// result is one answer as a test sees it.
type result struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

// errorField reads error.<name> of an error body.
func (r result) errorField(name string) any {
	e, _ := r.body["error"].(map[string]any)
	return e[name]
}

// headers builds request headers: Authorization with testKey unless given,
// then the pairs; a pair with an empty value removes the header.
func headers(kv ...string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" && kv[i] != "Idempotency-Key" {
			h.Del(kv[i])
			continue
		}
		h[http.CanonicalHeaderKey(kv[i])] = []string{kv[i+1]}
	}
	return h
}

// do sends one request with the default client and decodes a JSON answer.
// body is sent as is when it is a string or []byte, as JSON otherwise.
func do(t testing.TB, baseURL, method, path string, body any, h http.Header) result {
	t.Helper()
	r, err := doWith(http.DefaultClient, context.Background(), baseURL, method, path, body, h)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func doWith(client *http.Client, ctx context.Context, baseURL, method, path string, body any, h http.Header) (result, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return result{}, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL+path, rd)
	if err != nil {
		return result{}, err
	}
	if h == nil {
		h = headers()
	}
	req.Header = h.Clone()
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	out := result{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			return out, err
		}
	}
	return out, nil
}

// email is a valid POST /emails body.
func email(to string) map[string]any {
	return map[string]any{
		"from":    "Shop <shop@example.com>",
		"to":      []string{to},
		"subject": "Your invoice",
		"text":    "Invoice attached.",
	}
}

// wantStatus fails the test unless r has the status.
func wantStatus(t testing.TB, r result, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.raw)
	}
}

// wantError checks an error answer: status, type, code (unless "") and, if
// given, param.
func wantError(t testing.TB, r result, status int, typ, code string, param ...string) {
	t.Helper()
	wantStatus(t, r, status)
	if got := r.errorField("type"); got != typ {
		t.Errorf("error.type = %v, want %s; body %s", got, typ, r.raw)
	}
	if got := r.errorField("code"); code != "" && got != code {
		t.Errorf("error.code = %v, want %s; body %s", got, code, r.raw)
	}
	if len(param) > 0 && r.errorField("param") != param[0] {
		t.Errorf("error.param = %v, want %s; body %s", r.errorField("param"), param[0], r.raw)
	}
	if id, _ := r.errorField("requestId").(string); id == "" || id != r.header.Get("X-Request-Id") {
		t.Errorf("error.requestId = %q, x-request-id = %q: want equal and set", id, r.header.Get("X-Request-Id"))
	}
}

// clock is an injectable Config.Now the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	return &clock{now: time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// waitCtx bounds a wait so a broken test fails instead of hanging.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startTest is fakeapi.NewTest returning the base URL too.
func startTest(t testing.TB, cfg fakeapi.Config) (*fakeapi.Server, string) {
	srv := fakeapi.NewTest(t, cfg)
	return srv, srv.URL()
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
