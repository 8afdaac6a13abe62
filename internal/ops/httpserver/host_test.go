package httpserver_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sendonce/sendonce/internal/ops/httpserver"
)

// surfaces are the routes the no-token loopback exception opens: the
// outbox page, its actions, the River UI and its API.
var surfaces = []struct{ method, path string }{
	{"GET", "/outbox"},
	{"GET", "/outbox/"},
	{"GET", "/outbox/intent?key=password-reset:user_7"},
	{"POST", "/outbox/cancel"},
	{"POST", "/outbox/retry"},
	{"GET", "/riverui"},
	{"GET", "/riverui/"},
	{"GET", "/riverui/api/jobs"},
	{"POST", "/riverui/api/jobs/cancel"},
	{"POST", "/riverui/api/jobs/delete"},
}

// hostServer is the handler on a real listener, with UIs that count the
// requests that reach them.
func hostServer(t *testing.T, token string) (srv *httptest.Server, port string, reached *atomic.Int64) {
	t.Helper()
	reached = &atomic.Int64{}
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = w.Write([]byte("ui " + r.URL.Path))
	})
	srv = httptest.NewServer(httpserver.New(httpserver.Options{
		RiverUI: ui, OutboxUI: ui, UIToken: token,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) }),
	}))
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	return srv, port, reached
}

// send makes a real HTTP request to srv naming host in its Host header and,
// as a browser would on a page served from that host, in its Origin.
func send(t *testing.T, srv *httptest.Server, method, path, host string, header ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(`{"ids":["1"]}`)
	}
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNoTokenRefusesAForeignHost: without a token, a request whose Host is
// not loopback (a page of attacker.example whose name the attacker has
// re-pointed at 127.0.0.1: DNS rebinding) reaches neither UI, whatever its
// Origin says; loopback names and addresses, with or without the port, get
// in as before; the probes and /metrics answer any Host.
func TestNoTokenRefusesAForeignHost(t *testing.T) {
	t.Parallel()
	srv, port, reached := hostServer(t, "")
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "127.0.0.1.attacker.example:" + port,
		"localhost.attacker.example", "10.0.0.5:" + port, "[::]:" + port, "0.0.0.0:" + port} {
		for _, s := range surfaces {
			code, body := send(t, srv, s.method, s.path, host)
			if code != http.StatusForbidden || !strings.Contains(body, "Host") || !strings.Contains(body, "--ui-token") {
				t.Errorf("%s %s with Host %s: %d %q, want 403 naming the Host rule", s.method, s.path, host, code, body)
			}
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d requests with a foreign Host reached a UI", n)
	}
	for _, host := range []string{"127.0.0.1:" + port, "127.0.0.1", "127.8.0.1:" + port, "localhost:" + port, "LocalHost",
		"[::1]:" + port, "[::1]"} {
		for _, s := range surfaces {
			want := http.StatusOK
			if s.path == "/outbox" {
				want = http.StatusMovedPermanently
			}
			if code, body := send(t, srv, s.method, s.path, host); code != want {
				t.Errorf("%s %s with Host %s: %d %q, want %d", s.method, s.path, host, code, body, want)
			}
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := send(t, srv, "GET", p, "prometheus.internal:"+port); code != 200 {
			t.Errorf("GET %s with Host prometheus.internal: %d %q, want 200", p, code, body)
		}
	}
}

// TestTokenAcceptsAnyHost: with a token, the Host does not matter (a proxy
// or a DNS name in front of the listener): the token decides, as before.
func TestTokenAcceptsAnyHost(t *testing.T) {
	t.Parallel()
	srv, port, reached := hostServer(t, "ops:s3cret")
	for _, host := range []string{"sendonce.ops.example:" + port, "attacker.example", "127.0.0.1:" + port} {
		for _, s := range surfaces {
			want, wantNone := http.StatusOK, http.StatusUnauthorized
			if s.path == "/outbox" { // only a redirect to /outbox/, as before
				want, wantNone = http.StatusMovedPermanently, http.StatusMovedPermanently
			}
			if code, _ := send(t, srv, s.method, s.path, host); code != wantNone {
				t.Errorf("%s %s with Host %s and no token: %d, want %d", s.method, s.path, host, code, wantNone)
			}
			if code, body := send(t, srv, s.method, s.path, host, "Authorization", "Bearer s3cret"); code != want {
				t.Errorf("%s %s with Host %s and the token: %d %q, want %d", s.method, s.path, host, code, body, want)
			}
		}
	}
	if reached.Load() == 0 {
		t.Error("no request reached a UI")
	}
}

func TestIsLocalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost":        true,
		"LOCALHOST:9464":   true,
		"127.0.0.1":        true,
		"127.0.0.1:9464":   true,
		"127.255.0.9:80":   true,
		"[::1]":            true,
		"[::1]:9464":       true,
		"":                 false,
		"attacker.example": false,
		"localhost.evil":   false,
		"evil.localhost:1": false,
		"127.0.0.1.nip.io": false,
		"0.0.0.0:9464":     false,
		"[::]:9464":        false,
		"10.0.0.5":         false,
		"[::1":             false,
		"localhost:":       true,
	} {
		if got := httpserver.IsLocalHost(host); got != want {
			t.Errorf("IsLocalHost(%q) = %v, want %v", host, got, want)
		}
	}
}
