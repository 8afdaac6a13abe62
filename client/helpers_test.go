package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// testAPIKey is distinctive so that a leak is easy to find in any output.
const testAPIKey = "oe_test_K3Y-must-never-leak-7f3a9c"

// seenRequest is what crossed the wire in one attempt.
type seenRequest struct {
	Method     string
	RequestURI string
	Header     http.Header
	Body       []byte
}

// fakeAPI is an httptest server that records every request and answers with
// the handler for that attempt (the last handler repeats).
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	seen     []seenRequest
	handlers []http.HandlerFunc
}

func newFakeAPI(t *testing.T, handlers ...http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{handlers: handlers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.seen)
		f.seen = append(f.seen, seenRequest{Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone(), Body: body})
		h := f.handlers[min(n, len(f.handlers)-1)]
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

func (f *fakeAPI) count() int { return len(f.requests()) }

// respond answers status with body and optional header pairs.
func respond(status int, body string, headerPairs ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headerPairs); i += 2 {
			// Set the map directly so a test can send a non-canonical name.
			w.Header()[headerPairs[i]] = []string{headerPairs[i+1]}
		}
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

var (
	okEmail     = respond(200, `{"id":"em_1","status":"queued"}`)
	unavailable = respond(503, `{"error":{"type":"api_error","code":"unavailable","message":"try later"}}`)
)

// sleepRecorder is an injected sleep that records waits and returns at once,
// honouring a cancelled context as the real one does.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// newTestClient makes a client for baseURL with a recording sleep.
func newTestClient(t *testing.T, baseURL string, opts ...Option) (*Client, *sleepRecorder) {
	t.Helper()
	rec := &sleepRecorder{}
	// A transport of its own: httptest.Server.Close closes the idle
	// connections of http.DefaultTransport, which would break other
	// parallel tests' fresh connections and add attempts they did not make.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	all := append([]Option{WithAPIKey(testAPIKey), WithBaseURL(baseURL), WithSleep(rec.sleep), WithHTTPClient(&http.Client{Transport: tr})}, opts...)
	c, err := New(all...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, rec
}

// sampleEmail is a minimal valid send body.
func sampleEmail() *EmailParams {
	return &EmailParams{From: "a@example.com", To: Recipients{"b@example.com"}, Subject: "Hi", Text: "Hello"}
}

// call is one client call, run for its error alone: a row of the tables
// that try many calls the same way.
type call = func(ctx context.Context, c *Client) error

// requestSent runs one call against an API that answers it with okEmail,
// fails the test on an error, and returns the request that crossed the wire.
func requestSent(t *testing.T, run call, opts ...Option) seenRequest {
	t.Helper()
	api := newFakeAPI(t, okEmail)
	c, _ := newTestClient(t, api.URL, opts...)
	if err := run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return api.requests()[0]
}

// attemptsCase is a call and the number of attempts it must make.
type attemptsCase struct {
	name         string
	run          call
	wantAttempts int
}

// testAttempts runs each case in a parallel subtest, against an API of its
// own that answers every attempt with handler: check judges the call's
// error and the number of waits between attempts, then the attempts are
// counted.
func testAttempts(t *testing.T, handler http.HandlerFunc, opts []Option, cases []attemptsCase, check func(t *testing.T, tt attemptsCase, err error, waits int)) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, handler)
			c, rec := newTestClient(t, api.URL, opts...)
			err := tt.run(context.Background(), c)
			check(t, tt, err, len(rec.recorded()))
			if got := api.count(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
		})
	}
}

// sendCall is one of the four sends, run against c.
type sendCall struct {
	name string
	run  func(ctx context.Context, c *Client, opts ...RequestOption) error
}

var sendCalls = []sendCall{
	{"emails.send", func(ctx context.Context, c *Client, opts ...RequestOption) error {
		_, err := c.Emails.Send(ctx, sampleEmail(), opts...)
		return err
	}},
	{"emails.send_batch", func(ctx context.Context, c *Client, opts ...RequestOption) error {
		_, err := c.Emails.SendBatch(ctx, []*EmailParams{sampleEmail(), sampleEmail()}, opts...)
		return err
	}},
	{"templates.send", func(ctx context.Context, c *Client, opts ...RequestOption) error {
		_, err := c.Templates.Send(ctx, "welcome", &TemplateSendParams{To: Recipients{"b@example.com"}}, opts...)
		return err
	}},
	{"broadcasts.send", func(ctx context.Context, c *Client, opts ...RequestOption) error {
		_, err := c.Broadcasts.Send(ctx, &BroadcastParams{AudienceID: "aud_1", From: "a@example.com", Subject: "News", HTML: "<p>hi</p>"}, opts...)
		return err
	}},
}

// testNow is the injected clock of tests that use HTTP-date Retry-After.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// isStatus reports whether err is an *APIError with that status.
func isStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}
