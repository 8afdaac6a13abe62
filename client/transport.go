package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// This file is the one place that knows how a call crosses the wire: the
// headers, the idempotency key, the plain-http rule, the per-attempt timeout
// and the retry loop. Resource files (emails.go, templates.go, broadcasts.go)
// only describe requests and decode results.

// maxResponseBody bounds how much of a response is read. API responses are
// small JSON documents; the bound keeps a misbehaving server from exhausting
// memory.
const maxResponseBody = 32 << 20

// request is one call as the transport sees it.
type request struct {
	// call is the contract's name for the call ("emails.send"), which
	// decides through repeatableCalls whether a write is retried. It is
	// empty for raw requests.
	call   string
	method string
	// path starts with '/' and has its ids escaped already.
	path  string
	query url.Values
	// body is encoded as JSON; nil means no body (and no Content-Type).
	body any
	// send marks the four sends, which always carry an Idempotency-Key.
	send bool
	opts []RequestOption
}

// response is a 2xx response, fully read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do runs r and decodes a 2xx body into out (when out is non-nil and the body
// is not empty).
func (c *Client) do(ctx context.Context, r *request, out any) error {
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return err
	}
	if out == nil || len(bytes.TrimSpace(resp.body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(resp.body, out); err != nil {
		return fmt.Errorf("client: decoding %s %s response: %w", r.method, r.path, err)
	}
	return nil
}

// prepared is a call made ready to go out: resolved, encoded, with its
// headers and key, the same for every attempt.
type prepared struct {
	o          *requestOptions
	label      string
	method     string
	u          *url.URL
	logURL     string // never the query
	body       []byte
	header     http.Header
	idemKey    string
	repeatable bool
	log        *slog.Logger
}

// roundTrip sends r, retrying as the contract allows (shouldRetry decides),
// and returns the final 2xx response or the error that ended the call.
func (c *Client) roundTrip(ctx context.Context, r *request) (*response, error) {
	p, err := c.prepare(r)
	if err != nil {
		return nil, err
	}
	// unsure is set once an attempt of this call ended without a known
	// outcome (a network failure after the connection was made, a 5xx): a
	// refusal of a later attempt then says nothing of that one, which may
	// have been delivered (APIError.Uncertain).
	unsure := false
	// fail ends the call with a network failure, which carries whether an
	// earlier attempt may have been delivered (NetworkError.Uncertain): a
	// refused connection after a lost answer proves nothing of the request
	// the API may have taken before it.
	fail := func(nerr *NetworkError) (*response, error) {
		nerr.Uncertain = unsure
		return nil, nerr
	}
	for attempt := 0; ; attempt++ {
		if err := ctxDone(ctx); err != nil {
			return fail(c.networkError(p.method, p.logURL, err))
		}
		p.log.LogAttrs(ctx, slog.LevelDebug, "openemail: attempt", slog.Int("attempt", attempt+1), slog.Bool("repeatable", p.repeatable))
		started := time.Now()

		actx, span := startAttempt(ctx, p.label, p.method, p.u, p.idemKey, attempt)
		resp, err := c.attempt(actx, p.method, p.u.String(), p.body, p.header)
		if err != nil {
			if ctx.Err() != nil {
				// The caller's cancellation or deadline: never retried.
				nerr := c.canceled(ctx, p, err)
				endAttempt(span, 0, nerr, false, 0)
				return fail(nerr)
			}
			nerr := c.networkError(p.method, p.logURL, err)
			v := shouldRetry(networkFailure, noRetryAfter, attempt, c.cfg.maxRetries, p.repeatable)
			if !v.retry {
				endAttempt(span, 0, nerr, false, 0)
				p.log.LogAttrs(ctx, slog.LevelDebug, "openemail: network failure, giving up", slog.Int("attempt", attempt+1), slog.String("error", nerr.Error()))
				return fail(nerr)
			}
			unsure = unsure || !neverSent(err)
			wait := backoff(attempt + 1)
			endAttempt(span, 0, nerr, true, wait)
			p.log.LogAttrs(ctx, slog.LevelDebug, "openemail: network failure, retrying", slog.Int("attempt", attempt+1), slog.Duration("wait", wait), slog.String("error", nerr.Error()))
			if err := c.wait(ctx, wait); err != nil {
				return fail(c.networkError(p.method, p.logURL, fmt.Errorf("%w (while waiting to retry after: %s)", err, nerr.Error())))
			}
			continue
		}

		p.log.LogAttrs(ctx, slog.LevelDebug, "openemail: response", slog.Int("attempt", attempt+1), slog.Int("status", resp.status), slog.Duration("elapsed", time.Since(started)))
		rate := parseRateInfo(resp.header, c.cfg.now())
		p.o.noteRate(rate)

		if resp.status >= 200 && resp.status <= 299 {
			err := checkSuccess(resp)
			endAttempt(span, resp.status, err, false, 0)
			if err != nil {
				return nil, err
			}
			return resp, nil
		}

		retryAfter, hasWait := retryAfterFrom(resp.header, c.cfg.now())
		apiErr := c.redactAPIError(parseAPIError(resp.status, resp.header, resp.body, retryAfter))
		apiErr.Uncertain = unsure
		apiErr.RateLimit = rate
		if !hasWait {
			retryAfter = noRetryAfter
		}
		v := shouldRetry(resp.status, retryAfter, attempt, c.cfg.maxRetries, p.repeatable)
		if !v.retry {
			endAttempt(span, resp.status, apiErr, false, 0)
			return nil, apiErr
		}
		wait := v.wait
		if v.backoff {
			wait = backoff(attempt + 1)
		}
		unsure = unsure || resp.status >= 500
		endAttempt(span, resp.status, apiErr, true, wait)
		p.log.LogAttrs(ctx, slog.LevelDebug, "openemail: retrying", slog.Int("attempt", attempt+1), slog.Int("status", resp.status), slog.Duration("wait", wait), slog.Bool("retry_after", hasWait))
		if err := c.wait(ctx, wait); err != nil {
			return fail(c.networkError(p.method, p.logURL, fmt.Errorf("%w (while waiting to retry after: %s)", err, apiErr.Error())))
		}
	}
}

// canceled is the error of an attempt cut off by the caller's cancellation
// or deadline, which always names the context's error.
func (c *Client) canceled(ctx context.Context, p *prepared, err error) *NetworkError {
	if !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return c.networkError(p.method, p.logURL, err)
}

// checkSuccess refuses a 2xx whose body is not JSON: the work may have been
// done, and retrying cannot tell.
func checkSuccess(resp *response) error {
	if len(bytes.TrimSpace(resp.body)) > 0 && !json.Valid(resp.body) {
		return unrecognisedSuccess(resp.status, resp.header, resp.body)
	}
	return nil
}

// prepare makes r ready to go out: its options applied, its URL resolved
// and checked, its body encoded, its headers and idempotency key set.
func (c *Client) prepare(r *request) (*prepared, error) {
	o, err := applyRequestOptions(r.opts)
	if err != nil {
		return nil, err
	}

	target := r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	u, err := c.base.resolve(target)
	if err != nil {
		return nil, err
	}
	// Checked on every request, not only at New: whatever changes between
	// construction and now, the key must never go over plain http to a host
	// off this machine.
	if !secureOrigin(u) {
		return nil, fmt.Errorf("%w (%s)", ErrInsecureBaseURL, u.Host)
	}

	var body []byte
	if r.body != nil {
		body, err = json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding body: %w", ErrInvalidRequest, err)
		}
	}

	header := make(http.Header, 6)
	header.Set("Accept", "application/json")
	header.Set("User-Agent", c.cfg.userAgent)
	if body != nil {
		header.Set("Content-Type", "application/json")
	}
	header.Set("Authorization", "Bearer "+c.cfg.apiKey.reveal())

	// The key is made once here, before the first attempt, so every retry
	// of this call carries the same one and the API replays rather than
	// sends again; the next call makes a new key.
	idemKey := o.idempotencyKey
	if idemKey == "" && r.send {
		if idemKey, err = newIdempotencyKey(); err != nil {
			return nil, err
		}
	}
	if idemKey != "" {
		header.Set("Idempotency-Key", idemKey)
	}

	log := c.cfg.logger.With(
		slog.String("call", callLabel(r)),
		slog.String("method", r.method),
		slog.String("path", u.EscapedPath()),
	)
	if idemKey != "" {
		log = log.With(slog.String("idempotency_key", idemKey))
	}
	return &prepared{
		o: o, label: callLabel(r), method: r.method, u: u,
		logURL: u.Scheme + "://" + u.Host + u.EscapedPath(),
		body:   body, header: header, idemKey: idemKey,
		repeatable: c.isRepeatable(r, o), log: log,
	}, nil
}

func callLabel(r *request) string {
	if r.call != "" {
		return r.call
	}
	return "raw"
}

// attempt sends one request under its own timeout and reads the whole body
// before the timeout's context is released, so a stalled body counts against
// the attempt, not against nothing.
func (c *Client) attempt(ctx context.Context, method, target string, body []byte, header http.Header) (*response, error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.cfg.timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
	}
	defer cancel()

	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, target, rb)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	req.Header = header.Clone()
	if body != nil {
		// net/http resends a request on its own when a reused connection
		// fails after the request went out, if the request looks idempotent
		// to it: a GET, or anything carrying an Idempotency-Key. That would
		// be an attempt outside this loop, uncounted by WithMaxRetries and
		// made even with retries off. Refusing to rewind the body stops it;
		// a resend before anything was read from the body (a stale
		// connection that took nothing) still happens, as it is safe.
		// Body-less requests cannot be guarded this way; of those only GETs,
		// which are retried anyway, and raw keyed requests without a body
		// are affected.
		req.GetBody = refuseResend
	}

	resp, err := c.cfg.httpClient.Do(req)
	if err != nil {
		return nil, c.explainTimeout(ctx, actx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, c.explainTimeout(ctx, actx, fmt.Errorf("reading response body: %w", err))
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// errTransportResend is what net/http reports instead of resending a request
// whose body it had already sent (see attempt).
var errTransportResend = errors.New("connection failed after the request was sent")

func refuseResend() (io.ReadCloser, error) { return nil, errTransportResend }

// explainTimeout marks an error caused by the per-attempt timeout rather than
// by the caller's context.
func (c *Client) explainTimeout(ctx, actx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		return &attemptTimeoutError{timeout: c.cfg.timeout, err: err}
	}
	return err
}

// ctxDone is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed though its timer has not fired yet. A process stopped past the
// deadline (SIGSTOP, a frozen VM) runs on when it is continued with both
// its retry's wait and the deadline's timer due, and the retry may go
// first: without this it would make a request past the deadline, such as
// a worker's replay window, after which the API may have forgotten the
// idempotency key and deliver the email again.
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// wait sleeps d with the configured sleep and reports the caller's
// cancellation, even when a custom sleep ignored it.
func (c *Client) wait(ctx context.Context, d time.Duration) error {
	if err := c.cfg.sleep(ctx, d); err != nil {
		return err
	}
	return ctx.Err()
}

// networkError builds a NetworkError whose text has the API key scrubbed:
// errors from a caller's http.RoundTripper are not ours to trust.
func (c *Client) networkError(method, u string, err error) *NetworkError {
	ne := &NetworkError{Op: method, URL: u, Err: err}
	if text := causeText(err); c.containsKey(text) {
		ne.msg = c.scrub(text)
	}
	return ne
}

// redactAPIError removes the API key from anything the server echoed back.
func (c *Client) redactAPIError(e *APIError) *APIError {
	e.Message = c.scrub(e.Message)
	e.Param = c.scrub(e.Param)
	e.DocURL = c.scrub(e.DocURL)
	e.RequestID = c.scrub(e.RequestID)
	for i := range e.Fields {
		e.Fields[i].Error = c.scrub(e.Fields[i].Error)
	}
	if key := c.cfg.apiKey.reveal(); key != "" && bytes.Contains(e.Body, []byte(key)) {
		e.Body = bytes.ReplaceAll(e.Body, []byte(key), []byte(redacted))
	}
	return e
}

func (c *Client) containsKey(s string) bool {
	key := c.cfg.apiKey.reveal()
	return key != "" && strings.Contains(s, key)
}

func (c *Client) scrub(s string) string {
	if !c.containsKey(s) {
		return s
	}
	return strings.ReplaceAll(s, c.cfg.apiKey.reveal(), redacted)
}
