package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Rule 3: a repeatable call is retried only after 408, 500, 502, 503, 504,
// and 429 only with Retry-After; every other status ends the call at once.
func TestRetryByStatus(t *testing.T) {
	t.Parallel()
	// One row per status, alike on purpose: the table is the rule.
	tests := []struct {
		status       int
		retryAfter   string
		body         string
		wantAttempts int
	}{
		{408, "", "", 3},
		{500, "", "", 3},
		{502, "", "", 3},
		{503, "", "", 3},
		{504, "", "", 3},
		{429, "", "", 1},
		{429, "1", "", 3},
		{400, "", "", 1},
		{401, "", "", 1},
		{403, "", "", 1},
		{404, "", "", 1},
		{409, "", "", 1},
		{422, "", "", 1},
		{422, "1", "", 1}, // Retry-After does not make other statuses retryable
		{501, "", "", 1},
		{505, "", "", 1},
		{507, "", "", 1},
		{302, "", "", 1},                // redirects are not followed
		{200, "", "<html>ok</html>", 1}, // 2xx not JSON: api_error/unrecognised_response
	}
	for _, tt := range tests {
		name := http.StatusText(tt.status)
		if tt.retryAfter != "" {
			name += " Retry-After " + tt.retryAfter
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := []string{}
			if tt.retryAfter != "" {
				h = append(h, "Retry-After", tt.retryAfter)
			}
			if tt.status == 302 {
				h = append(h, "Location", "/elsewhere")
			}
			api := newFakeAPI(t, respond(tt.status, tt.body, h...))
			c, _ := newTestClient(t, api.URL)
			_, err := c.Emails.Send(context.Background(), sampleEmail())
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tt.status {
				t.Fatalf("err = %v, want *APIError status %d", err, tt.status)
			}
			if tt.status == 200 && (apiErr.Type != TypeAPI || apiErr.Code != CodeUnrecognisedResponse) {
				t.Errorf("2xx non-JSON: type/code = %s/%s", apiErr.Type, apiErr.Code)
			}
			if got := api.count(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
		})
	}
}

// Rule 3: a network failure is retried for repeatable calls only.
func TestNetworkFailureRetried(t *testing.T) {
	t.Parallel()
	dropConnection := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	testAttempts(t, dropConnection, nil, []attemptsCase{
		{"emails.send", func(ctx context.Context, c *Client) error { _, err := c.Emails.Send(ctx, sampleEmail()); return err }, 3},
		{"emails.get", func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em_1"); return err }, 3},
		{"raw POST", func(ctx context.Context, c *Client) error { return c.Do(ctx, "POST", "/x", map[string]int{}, nil) }, 1},
	}, func(t *testing.T, tt attemptsCase, err error, waits int) {
		var ne *NetworkError
		if !errors.As(err, &ne) {
			t.Fatalf("err = %T %v, want *NetworkError", err, err)
		}
		if waits != tt.wantAttempts-1 {
			t.Errorf("waits = %d, want %d", waits, tt.wantAttempts-1)
		}
	})
	// And a send that recovers keeps its key across the network failure.
	api := newFakeAPI(t, dropConnection, okEmail)
	c, _ := newTestClient(t, api.URL)
	if _, err := c.Emails.Send(context.Background(), sampleEmail()); err != nil {
		t.Fatal(err)
	}
	reqs := api.requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Idempotency-Key") != reqs[1].Header.Get("Idempotency-Key") {
		t.Fatalf("want 2 attempts with one key, got %d", len(reqs))
	}
}

// Rule 4: the waits between attempts. Without Retry-After, retry n waits in
// [cap/2, cap]; with it, exactly what the server asked; over 60 s, no retry
// and the wait is on the error.
func TestRetryWaits(t *testing.T) {
	t.Parallel()
	type span struct{ lo, hi time.Duration }
	exactly := func(d time.Duration) span { return span{d, d} }
	ms := time.Millisecond
	tests := []struct {
		name           string
		handler        http.HandlerFunc
		wantWaits      []span
		wantRetryAfter time.Duration // on the final error, when the call fails
		wantOK         bool
	}{
		{"backoff without Retry-After", unavailable,
			[]span{{250 * ms, 500 * ms}, {500 * ms, 1000 * ms}}, 0, false},
		{"delay-seconds waited exactly", respond(503, "", "Retry-After", "2"),
			[]span{exactly(2 * time.Second), exactly(2 * time.Second)}, 2 * time.Second, false},
		{"decimal seconds", respond(500, "", "Retry-After", "1.5"),
			[]span{exactly(1500 * ms), exactly(1500 * ms)}, 1500 * ms, false},
		{"zero means no wait", respond(429, "", "Retry-After", "0"),
			[]span{exactly(0), exactly(0)}, 0, false},
		{"429 with Retry-After", respond(429, "", "Retry-After", "7"),
			[]span{exactly(7 * time.Second), exactly(7 * time.Second)}, 7 * time.Second, false},
		{"lower-case header name", respond(503, "", "retry-after", "3"),
			[]span{exactly(3 * time.Second), exactly(3 * time.Second)}, 3 * time.Second, false},
		{"HTTP-date against injected now", respond(503, "", "Retry-After", "Sun, 01 Mar 2026 12:00:10 GMT"),
			[]span{exactly(10 * time.Second), exactly(10 * time.Second)}, 10 * time.Second, false},
		{"past HTTP-date means no wait", respond(503, "", "Retry-After", "Sun, 01 Mar 2026 11:00:00 GMT"),
			[]span{exactly(0), exactly(0)}, 0, false},
		{"exactly 60s is waited", respond(503, "", "Retry-After", "60"),
			[]span{exactly(time.Minute), exactly(time.Minute)}, time.Minute, false},
		{"over 60s stops a 503", respond(503, "", "Retry-After", "61"),
			nil, 61 * time.Second, false},
		{"over 60s stops a 429", respond(429, "", "Retry-After", "120"),
			nil, 2 * time.Minute, false},
		{"over 60s as HTTP-date", respond(504, "", "Retry-After", "Sun, 01 Mar 2026 12:05:00 GMT"),
			nil, 5 * time.Minute, false},
		{"negative is absent: backoff", respond(503, "", "Retry-After", "-5"),
			[]span{{250 * ms, 500 * ms}, {500 * ms, 1000 * ms}}, 0, false},
		{"non-finite is absent: backoff", respond(503, "", "Retry-After", "Infinity"),
			[]span{{250 * ms, 500 * ms}, {500 * ms, 1000 * ms}}, 0, false},
		{"unparsable is absent: 429 not retried", respond(429, "", "Retry-After", "later"),
			nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tt.handler)
			c, rec := newTestClient(t, api.URL, WithNow(func() time.Time { return testNow }))
			_, err := c.Emails.Send(context.Background(), sampleEmail())
			waits := rec.recorded()
			if len(waits) != len(tt.wantWaits) {
				t.Fatalf("waits = %v, want %d waits", waits, len(tt.wantWaits))
			}
			for i, w := range waits {
				if w < tt.wantWaits[i].lo || w > tt.wantWaits[i].hi {
					t.Errorf("wait %d = %v, want in [%v, %v]", i+1, w, tt.wantWaits[i].lo, tt.wantWaits[i].hi)
				}
			}
			if got := api.count(); got != len(tt.wantWaits)+1 {
				t.Errorf("attempts = %d, want %d", got, len(tt.wantWaits)+1)
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *APIError", err)
			}
			if apiErr.RetryAfter != tt.wantRetryAfter {
				t.Errorf("APIError.RetryAfter = %v, want %v", apiErr.RetryAfter, tt.wantRetryAfter)
			}
		})
	}
}

// Rule 4: WithMaxRetries bounds the attempts; 0 turns retries off; negative
// counts as 0; the default is 2.
func TestMaxRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		opts         []Option
		wantAttempts int
	}{
		{"default", nil, 3},
		{"0 is off", []Option{WithMaxRetries(0)}, 1},
		{"1", []Option{WithMaxRetries(1)}, 2},
		{"5", []Option{WithMaxRetries(5)}, 6},
		{"negative is 0", []Option{WithMaxRetries(-3)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, unavailable)
			c, rec := newTestClient(t, api.URL, tt.opts...)
			_, _ = c.Emails.Send(context.Background(), sampleEmail())
			if got := api.count(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
			waits := rec.recorded()
			for i, w := range waits {
				if c := backoffCap(i + 1); w < c/2 || w > c {
					t.Errorf("wait %d = %v outside [%v, %v]", i+1, w, c/2, c)
				}
			}
		})
	}
}

// blockUntilCancelled holds the request until the client gives up on it.
func blockUntilCancelled(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

// Rule 5: the timeout bounds each attempt afresh, and a timed-out attempt is
// a network failure that repeatable calls retry.
func TestTimeoutEachAttemptAfresh(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	// Two attempts hang past the timeout; the third answers after most of a
	// timeout. A timeout for the whole call, or one not reset per attempt,
	// would have run out before the third answer.
	slowOK := func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(timeout / 2)
		okEmail(w, r)
	}
	api := newFakeAPI(t, blockUntilCancelled, blockUntilCancelled, slowOK)
	c, rec := newTestClient(t, api.URL, WithTimeout(timeout))
	email, err := c.Emails.Send(context.Background(), sampleEmail())
	if err != nil {
		t.Fatalf("err = %v, want success on the third attempt", err)
	}
	if email.ID != "em_1" || api.count() != 3 || len(rec.recorded()) != 2 {
		t.Fatalf("id=%q attempts=%d waits=%d; want em_1, 3, 2", email.ID, api.count(), len(rec.recorded()))
	}
	reqs := api.requests()
	if reqs[0].Header.Get("Idempotency-Key") != reqs[2].Header.Get("Idempotency-Key") {
		t.Error("the retry after a timeout changed the idempotency key")
	}
}

func TestTimeoutIsNetworkError(t *testing.T) {
	t.Parallel()
	testAttempts(t, blockUntilCancelled, []Option{WithTimeout(30 * time.Millisecond)}, []attemptsCase{
		{"send retried", func(ctx context.Context, c *Client) error { _, err := c.Emails.Send(ctx, sampleEmail()); return err }, 3},
		{"raw POST not retried", func(ctx context.Context, c *Client) error { return c.Do(ctx, "POST", "/x", map[string]int{}, nil) }, 1},
	}, func(t *testing.T, _ attemptsCase, err error, _ int) {
		var ne *NetworkError
		if !errors.As(err, &ne) || !ne.Timeout() || !IsTimeout(err) {
			t.Fatalf("err = %v, want a timeout *NetworkError", err)
		}
		if !strings.Contains(err.Error(), "attempt timed out") {
			t.Errorf("error %q does not say the attempt timed out", err)
		}
	})
}

// Rule 5: a cancelled or expired context is never retried and surfaces at
// once as a *NetworkError, during a request or during the wait.
func TestContextEndsCallAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup returns the handler and the context for the call, and a
		// sleep to inject.
		setup        func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error)
		wantAttempts int
		wantErr      error
		wantTimeout  bool
		wantWaits    int // waits started; a cancellation during a request starts none
	}{
		{"cancelled during the request", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return func(w http.ResponseWriter, r *http.Request) {
				cancel()
				blockUntilCancelled(w, r)
			}, ctx, nil
		}, 1, context.Canceled, false, 0},
		{"deadline during the request", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return blockUntilCancelled, ctx, nil
		}, 1, context.DeadlineExceeded, true, 0},
		{"cancelled during the wait", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return unavailable, ctx, func(ctx context.Context, d time.Duration) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			}
		}, 1, context.Canceled, false, 1},
		{"cancelled during a wait whose sleep ignores ctx", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return unavailable, ctx, func(context.Context, time.Duration) error {
				cancel()
				return nil
			}
		}, 1, context.Canceled, false, 1},
		{"cancelled during the real default sleep", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return unavailable, ctx, func(ctx context.Context, d time.Duration) error {
				time.AfterFunc(20*time.Millisecond, cancel)
				return sleepContext(ctx, time.Hour)
			}
		}, 1, context.Canceled, false, 1},
		{"deadline during the wait", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			t.Cleanup(cancel)
			return unavailable, ctx, func(ctx context.Context, d time.Duration) error { return sleepContext(ctx, time.Hour) }
		}, 1, context.DeadlineExceeded, true, 1},
		{"deadline passed during a wait, its timer not yet fired", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx := &stoppedCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour)}
			return unavailable, ctx, func(context.Context, time.Duration) error {
				ctx.stop()
				return nil
			}
		}, 1, context.DeadlineExceeded, true, 1},
		{"already cancelled", func(t *testing.T) (http.HandlerFunc, context.Context, func(context.Context, time.Duration) error) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return okEmail, ctx, nil
		}, 0, context.Canceled, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			handler, ctx, sleep := tt.setup(t)
			api := newFakeAPI(t, handler)
			var waits atomic.Int32
			if sleep == nil {
				sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
			}
			counted := func(ctx context.Context, d time.Duration) error { waits.Add(1); return sleep(ctx, d) }
			c, _ := newTestClient(t, api.URL, WithSleep(counted))
			start := time.Now()
			_, err := c.Emails.Send(ctx, sampleEmail())
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Errorf("call took %v; cancellation must end it at once", elapsed)
			}
			var ne *NetworkError
			if !errors.As(err, &ne) {
				t.Fatalf("err = %T %v, want *NetworkError", err, err)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.wantErr)
			}
			if ne.Timeout() != tt.wantTimeout {
				t.Errorf("Timeout() = %v, want %v", ne.Timeout(), tt.wantTimeout)
			}
			if got := api.count(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
			if got := int(waits.Load()); got != tt.wantWaits {
				t.Errorf("waits = %d, want %d", got, tt.wantWaits)
			}
		})
	}
}

// stoppedCtx is a context whose deadline can pass before its timer fires:
// what a process stopped (SIGSTOP, a frozen VM) across a deadline sees when
// it is continued, until the runtime runs the deadline's timer. Err stays
// nil.
type stoppedCtx struct {
	context.Context
	mu       sync.Mutex
	deadline time.Time
}

func (c *stoppedCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

// stop moves the deadline into the past, as a stop across it does.
func (c *stoppedCtx) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = time.Now().Add(-time.Millisecond)
}

func TestSleepContext(t *testing.T) {
	t.Parallel()
	if err := sleepContext(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	if err := sleepContext(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}

// Headers as the API expects them.
func TestHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		opts            []Option
		run             func(context.Context, *Client) error
		wantContentType string
		wantUA          string
	}{
		{"send has a JSON body", nil, func(ctx context.Context, c *Client) error { _, err := c.Emails.Send(ctx, sampleEmail()); return err },
			"application/json", "sendonce-go/" + Version},
		{"cancel has no body and no Content-Type", nil, func(ctx context.Context, c *Client) error { _, err := c.Emails.Cancel(ctx, "em_1"); return err },
			"", "sendonce-go/" + Version},
		{"get", []Option{WithUserAgent("myapp/1.2")}, func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em_1"); return err },
			"", "myapp/1.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := requestSent(t, tt.run, tt.opts...)
			checks := map[string]string{
				"Accept":        "application/json",
				"User-Agent":    tt.wantUA,
				"Content-Type":  tt.wantContentType,
				"Authorization": "Bearer " + testAPIKey,
			}
			for k, want := range checks {
				if got := r.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if tt.wantContentType == "" && len(r.Body) != 0 {
				t.Errorf("body = %q, want none", r.Body)
			}
		})
	}
}

// A redirect is never followed, with the default client or the caller's.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	target := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { followed.Add(1); okEmail(w, r) })
	api := newFakeAPI(t, respond(307, "", "Location", target.URL+"/emails"))
	for _, opts := range [][]Option{nil, {WithHTTPClient(&http.Client{})}} {
		c, _ := newTestClient(t, api.URL, opts...)
		_, err := c.Emails.Get(context.Background(), "em_1")
		if !isStatus(err, 307) || followed.Load() != 0 {
			t.Fatalf("err = %v, followed = %d; want a 307 APIError and no redirect", err, followed.Load())
		}
	}
}

// Bodies are read within the attempt: a body that stalls past the timeout is
// a timed-out attempt, retried like any other.
func TestStalledBodyTimesOut(t *testing.T) {
	t.Parallel()
	stall := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `{"id":`)
		w.(http.Flusher).Flush()
		blockUntilCancelled(w, r)
	}
	api := newFakeAPI(t, stall, okEmail)
	c, _ := newTestClient(t, api.URL, WithTimeout(50*time.Millisecond))
	email, err := c.Emails.Send(context.Background(), sampleEmail())
	if err != nil || email.ID != "em_1" || api.count() != 2 {
		t.Fatalf("email=%v err=%v attempts=%d", email, err, api.count())
	}
}

// net/http resends a keyed request by itself when a reused connection fails
// after the request was written. The client stops that: attempts on the wire
// are exactly the ones its retry policy makes, so WithMaxRetries(0) means one.
func TestNoHiddenTransportResend(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var requests atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if n := requests.Add(1); n >= 2 {
						return // read the send, then hang up without answering
					}
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			}(conn)
		}
	}()
	c, _ := newTestClient(t, "http://"+ln.Addr().String(), WithMaxRetries(0))
	if _, err := c.Emails.Get(context.Background(), "em_1"); err != nil { // warms a keep-alive connection
		t.Fatal(err)
	}
	_, err = c.Emails.Send(context.Background(), sampleEmail())
	var ne *NetworkError
	if !errors.As(err, &ne) {
		t.Fatalf("err = %v, want *NetworkError", err)
	}
	time.Sleep(50 * time.Millisecond) // let a resend, if any, arrive
	if got := requests.Load(); got != 2 {
		t.Fatalf("server saw %d requests, want 2 (one GET, one send): the send was resent behind the retry policy", got)
	}
}
