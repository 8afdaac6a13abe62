package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// leakyTransport fails with an error that quotes the request's headers, as a
// careless http.RoundTripper might.
type leakyTransport struct{}

func (leakyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("proxy refused request with headers %v", r.Header)
}

// Rule 6: the API key never appears in an error, a log line or a formatted
// value, whatever goes wrong.
func TestAPIKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var jsonLogs syncbuf.Buffer
	jsonLogger := slog.New(slog.NewJSONHandler(&jsonLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	var outputs []string
	collect := func(what string, err error) {
		if err == nil {
			t.Errorf("%s: want an error", what)
			return
		}
		outputs = append(outputs, what+": "+err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
		logger.Error("call failed", "err", err)
		jsonLogger.Error("call failed", "err", err)
	}

	// An API that echoes the credential back in its error body and in a
	// request id header.
	echo := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Request-Id", auth)
		w.WriteHeader(401)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"type": "authentication_error", "message": "bad credential " + auth, "param": auth,
			"fields": []map[string]string{{"key": "auth", "error": auth}},
		}})
	})
	c, _ := newTestClient(t, echo.URL, WithLogger(logger))
	_, err := c.Emails.Send(ctx, sampleEmail())
	collect("echoed 401", err)
	var apiErr *APIError
	if errors.As(err, &apiErr) && bytes.Contains(apiErr.Body, []byte(testAPIKey)) {
		t.Error("APIError.Body holds the key")
	}

	// A 503 with plain-text body quoting the key, retried then surfaced.
	plain := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		_, _ = w.Write([]byte("upstream said no to " + r.Header.Get("Authorization")))
	})
	c, _ = newTestClient(t, plain.URL, WithLogger(logger))
	_, err = c.Emails.Get(ctx, "em_1")
	collect("plain 503", err)

	// A RoundTripper whose errors quote the headers.
	c, _ = newTestClient(t, "https://api.openemail.uk", WithLogger(logger), WithHTTPClient(&http.Client{Transport: leakyTransport{}}))
	_, err = c.Emails.Send(ctx, sampleEmail())
	collect("leaky transport", err)

	// Nothing listening, a timeout, a cancellation.
	c, _ = newTestClient(t, "http://127.0.0.1:1", WithLogger(logger))
	_, err = c.Emails.Send(ctx, sampleEmail())
	collect("connection refused", err)
	slow := newFakeAPI(t, blockUntilCancelled)
	c, _ = newTestClient(t, slow.URL, WithLogger(logger), WithTimeout(10*time.Millisecond))
	_, err = c.Emails.Send(ctx, sampleEmail())
	collect("timeout", err)

	// Refused before sending: plain http to a remote host; bad keys.
	c, _ = newTestClient(t, "http://api.openemail.uk", WithLogger(logger))
	_, err = c.Emails.Send(ctx, sampleEmail())
	collect("plain http", err)
	_, err = New(WithAPIKey("live_" + testAPIKey))
	collect("bad prefix", err)
	_, err = New(WithAPIKey(testAPIKey + " trailing"))
	collect("whitespace", err)
	_, err = New(WithAPIKey(testAPIKey), WithBaseURL("https://user:"+testAPIKey+"@api.example.com"))
	collect("key in base URL", err)

	// Formatting and logging the client itself, every verb.
	c, _ = newTestClient(t, echo.URL)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		outputs = append(outputs, fmt.Sprintf(verb, c), fmt.Sprintf(verb, *c), fmt.Sprintf(verb, c.cfg), fmt.Sprintf(verb, c.cfg.apiKey))
	}
	logger.Info("client", "client", c, "config", c.cfg, "key", c.cfg.apiKey)
	jsonLogger.Info("client", "client", c, "config", c.cfg, "key", c.cfg.apiKey)
	if b, err := json.Marshal(c.cfg.apiKey); err == nil {
		outputs = append(outputs, string(b))
	}

	outputs = append(outputs, logs.String(), jsonLogs.String())
	for _, out := range outputs {
		if strings.Contains(out, testAPIKey) || strings.Contains(out, "K3Y-must-never-leak") {
			t.Errorf("API key leaked in: %s", out)
		}
	}
	if !strings.Contains(logs.String(), "openemail: attempt") {
		t.Error("debug log has no attempt records; the test would not see a leak there")
	}
}

// The debug log records attempts and retries, and never bodies.
func TestLoggerRecordsAttemptsNotBodies(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api := newFakeAPI(t, respond(503, `{"error":{"message":"response-body-marker"}}`), respond(200, `{"id":"em_1","status":"queued","subject":"response-body-marker"}`))
	c, _ := newTestClient(t, api.URL, WithLogger(logger))
	p := sampleEmail()
	p.Text = "request-body-marker"
	if _, err := c.Emails.Send(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"call=emails.send", "attempt=1", "attempt=2", "status=503", "openemail: retrying", "wait="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"request-body-marker", "response-body-marker", testAPIKey} {
		if strings.Contains(out, never) {
			t.Errorf("log contains %q:\n%s", never, out)
		}
	}
}
