package httpserver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/ops/httpserver"
)

func get(t *testing.T, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	// On the loopback address, as a browser on the machine asks: without a
	// token only a loopback Host gets in (see host_test.go).
	req := httptest.NewRequest("GET", "http://127.0.0.1:9464"+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestProbes(t *testing.T) {
	var down error
	h := httpserver.New(httpserver.Options{
		Ready:   func(context.Context) error { return down },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) }),
	})
	if r := get(t, h, "/healthz"); r.Code != 200 || r.Body.String() != "ok\n" {
		t.Errorf("/healthz: %d %q", r.Code, r.Body)
	}
	if r := get(t, h, "/readyz"); r.Code != 200 {
		t.Errorf("/readyz: %d %q", r.Code, r.Body)
	}
	down = errors.New("database unreachable: connection refused")
	if r := get(t, h, "/readyz"); r.Code != 503 || !strings.Contains(r.Body.String(), "connection refused") {
		t.Errorf("/readyz with the database down: %d %q", r.Code, r.Body)
	}
	down = nil
	h.SetDraining()
	if r := get(t, h, "/readyz"); r.Code != 503 || !strings.Contains(r.Body.String(), "shutting down") {
		t.Errorf("/readyz while draining: %d %q", r.Code, r.Body)
	}
	if r := get(t, h, "/healthz"); r.Code != 200 {
		t.Errorf("/healthz while draining: %d", r.Code)
	}
	if r := get(t, h, "/metrics"); r.Code != 200 || r.Body.String() != "m 1\n" {
		t.Errorf("/metrics: %d %q", r.Code, r.Body)
	}
	if r := get(t, h, "/riverui/"); r.Code != 404 {
		t.Errorf("/riverui/ without a UI: %d", r.Code)
	}
}

func TestUITokenGuardsOnlyTheUI(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ui " + r.URL.Path)) })
	h := httpserver.New(httpserver.Options{RiverUI: ui, UIToken: "s3cret", Metrics: http.NotFoundHandler()})
	basic := func(user, pw string) string {
		req := httptest.NewRequest("GET", "/", nil)
		req.SetBasicAuth(user, pw)
		return req.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"no token", "/riverui/", "", 401},
		{"no token, api", "/riverui/api/jobs", "", 401},
		{"no token, bare prefix", "/riverui", "", 401},
		{"wrong bearer", "/riverui/", "Bearer nope", 401},
		{"wrong basic", "/riverui/", basic("admin", "nope"), 401},
		{"bearer", "/riverui/api/jobs", "Bearer s3cret", 200},
		{"bearer, any case", "/riverui/", "bearer s3cret", 200},
		{"basic, any user", "/riverui/", basic("anyone", "s3cret"), 200},
		{"probes stay open", "/healthz", "", 200},
		{"metrics stay open", "/metrics", "", 404}, // reaches the metrics handler
	} {
		r := get(t, h, tc.path, "Authorization", tc.auth)
		if r.Code != tc.want {
			t.Errorf("%s: GET %s: %d, want %d", tc.name, tc.path, r.Code, tc.want)
		}
		if r.Code == 401 && !strings.Contains(r.Header().Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s: 401 without a Basic challenge", tc.name)
		}
	}
	// Without a token, the UI is open (loopback only; the command enforces that).
	open := httpserver.New(httpserver.Options{RiverUI: ui})
	if r := get(t, open, "/riverui/"); r.Code != 200 {
		t.Errorf("no token configured: %d", r.Code)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9464": true,
		"127.8.0.1:9464": true,
		"[::1]:9464":     true,
		"localhost:9464": true,
		"LocalHost:0":    true,
		":9464":          false,
		"0.0.0.0:9464":   false,
		"[::]:9464":      false,
		"10.0.0.5:9464":  false,
		"example.com:80": false,
	} {
		if got := httpserver.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestUIRefusesCrossOriginWrites(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("done")) })
	h := httpserver.New(httpserver.Options{RiverUI: ui})
	post := func(header ...string) int {
		req := httptest.NewRequest("POST", "http://127.0.0.1:9464/riverui/api/jobs/cancel", strings.NewReader(`{"ids":["1"]}`))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post("Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", code)
	}
	if code := post("Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("POST from another origin: %d, want 403", code)
	}
	if code := post("Sec-Fetch-Site", "same-origin", "Origin", "http://127.0.0.1:9464"); code != 200 {
		t.Errorf("same-origin POST: %d, want 200", code)
	}
	if code := post(); code != 200 {
		t.Errorf("POST from a non-browser client: %d, want 200", code)
	}
}

func TestParseTokens(t *testing.T) {
	for in, want := range map[string][]httpserver.Token{
		"":                      nil,
		"s3cret":                {{Name: "token", Secret: "s3cret"}},
		"alice:s3cret":          {{Name: "alice", Secret: "s3cret"}},
		"alice:s3:cret, bob:b2": {{Name: "alice", Secret: "s3:cret"}, {Name: "bob", Secret: "b2"}},
		"alice:":                {{Name: "token", Secret: "alice:"}},
		"not a name:s3cret":     {{Name: "token", Secret: "not a name:s3cret"}},
		",":                     {{Name: "token", Secret: ","}},
	} {
		got := httpserver.ParseTokens(in)
		if len(got) != len(want) {
			t.Errorf("ParseTokens(%q) = %v, want %v", in, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("ParseTokens(%q) = %v, want %v", in, got, want)
			}
		}
	}
}

func TestOutboxPageSharesTheGuard(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("page " + r.URL.Path + " who=" + httpserver.Who(r.Context())))
	})
	h := httpserver.New(httpserver.Options{OutboxUI: page, UIToken: "alice:a1,bob:b2"})
	if r := get(t, h, "/outbox/"); r.Code != 401 {
		t.Errorf("/outbox/ without a token: %d", r.Code)
	}
	if r := get(t, h, "/outbox/intents", "Authorization", "Bearer b2"); r.Code != 200 || r.Body.String() != "page /outbox/intents who=bob" {
		t.Errorf("/outbox/intents with bob's token: %d %q", r.Code, r.Body)
	}
	if r := get(t, h, "/outbox"); r.Code != http.StatusMovedPermanently || r.Header().Get("Location") != "/outbox/" {
		t.Errorf("/outbox: %d %q", r.Code, r.Header().Get("Location"))
	}
	open := httpserver.New(httpserver.Options{OutboxUI: page})
	if r := get(t, open, "/outbox/"); r.Code != 200 || r.Body.String() != "page /outbox/ who=" {
		t.Errorf("no token configured: %d %q", r.Code, r.Body)
	}
}
