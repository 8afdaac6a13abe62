package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Header names the fake reads or writes.
const (
	headerRequestID      = "X-Request-Id"
	headerIdempotencyKey = "Idempotency-Key"
	headerFault          = "X-Fake-Fault"
	headerRetryAfter     = "Retry-After"
)

// statusClientGone is recorded for a request whose client went away (or whose
// server closed) before it was answered, after nginx's "client closed request".
const statusClientGone = 499

// call is one API request on its way through the fake. Handlers write their
// answer into it; nothing reaches the wire until finish, so a fault can still
// replace the answer or drop the connection after the work is done.
type call struct {
	w         http.ResponseWriter
	r         *http.Request
	rec       *RequestRecord
	requestID string
	apiKey    string
	idemKey   string
	hasKey    bool   // the Idempotency-Key header was present, even if empty
	id        string // the {id} path parameter, unescaped
	body      []byte
	faults    []Fault // rules from X-Fake-Fault

	status      int
	header      http.Header
	respBody    []byte
	abandoned   bool // no answer: the client left or the server is closing
	dropped     bool // drop_after fired: close the connection instead of answering
	rateLimited bool // the rate limiter refused it (not an injected fault)
	fired       []string
}

func newID(prefix string) string {
	return prefix + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// ServeHTTP answers one request: /_fake/… control endpoints directly, every
// other path through auth, routing, faults and the handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := newID("req_")
	w.Header().Set(headerRequestID, requestID)
	if r.URL.Path == "/_fake" || strings.HasPrefix(r.URL.Path, "/_fake/") {
		s.serveControl(w, r, requestID)
		return
	}
	c := &call{w: w, r: r, requestID: requestID, header: http.Header{}}
	c.idemKey, c.hasKey = idempotencyKeyHeader(r.Header)
	c.rec = &RequestRecord{
		RequestID:      requestID,
		ReceivedAt:     s.now(),
		Method:         r.Method,
		Path:           r.URL.Path,
		Query:          r.URL.RawQuery,
		IdempotencyKey: c.idemKey,
	}
	s.mu.Lock()
	s.requests = append(s.requests, c.rec)
	s.mu.Unlock()

	start := time.Now()
	s.serveAPI(c)
	s.finish(c)
	s.logRequest(c, time.Since(start))
}

// idempotencyKeyHeader returns the Idempotency-Key and whether the header was
// sent at all: an empty key is sent by some clients and must be refused, not
// mistaken for "no key".
func idempotencyKeyHeader(h http.Header) (string, bool) {
	v, ok := h[headerIdempotencyKey]
	if !ok || len(v) == 0 {
		return "", false
	}
	return strings.TrimSpace(v[0]), true
}

// serveAPI runs the steps before and including the handler. Each step may
// answer and stop.
func (s *Server) serveAPI(c *call) {
	if err := s.authenticate(c); err != nil {
		c.fail(err)
		return
	}
	// The limiter comes right after authentication: every authenticated
	// request counts, even one for an unknown path, and a refused one goes
	// no further (no body read, no fault fired, no key claimed, nothing sent).
	if !s.applyRateLimit(c) || !s.applyQuota(c) {
		return
	}
	rt, id, err := matchRoute(c.r.Method, c.r.URL.EscapedPath())
	if err != nil {
		if err.status == http.StatusMethodNotAllowed {
			c.header.Set("Allow", strings.Join(allowedMethods(c.r.URL.EscapedPath()), ", "))
		}
		c.fail(err)
		return
	}
	c.id = id
	if err := c.readBody(s.cfg.MaxBodyBytes); err != nil {
		c.fail(err)
		return
	}
	faults, err := headerFaults(c.r.Header)
	if err != nil {
		c.fail(err)
		return
	}
	c.faults = faults
	if !s.applyFaultsBefore(c) {
		return
	}
	rt.handle(s, c)
}

// readBody reads the whole body, so faults can match on recipients and the
// send path can fingerprint it; over the limit is 413.
func (c *call) readBody(limit int64) *apiError {
	if c.r.Body == nil || c.r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return newError(http.StatusRequestEntityTooLarge, typeInvalidRequest, "request_too_large",
			"The request body is larger than the limit of "+formatBytes(limit)+".")
	case err != nil:
		return invalidRequest("unreadable_body", "The request body could not be read.")
	}
	c.body = b
	return nil
}

// formatBytes renders a size for messages: "10 MiB", "512 KiB", "100 bytes".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// finish applies the after-faults to a successful answer, then writes it,
// drops the connection, or writes nothing when the call was abandoned.
func (s *Server) finish(c *call) {
	if !c.abandoned && c.status >= 200 && c.status < 300 {
		s.applyFaultsAfter(c)
	}
	status := c.status
	switch {
	case c.abandoned:
		status = statusClientGone
	case c.dropped:
		status = 0
	}
	s.mu.Lock()
	c.rec.Status = status
	c.rec.Dropped = c.dropped
	c.rec.RateLimited = c.rateLimited
	c.rec.Fault = strings.Join(c.fired, ", ")
	c.rec.RetryAfter = c.header.Get(headerRetryAfter)
	c.rec.AnsweredAt = s.now()
	s.notifyLocked()
	s.mu.Unlock()

	switch {
	case c.abandoned:
	case c.dropped:
		dropConnection(c.w)
	default:
		for k, v := range c.header {
			c.w.Header()[k] = v
		}
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(c.status)
		c.w.Write(c.respBody)
	}
}

// dropConnection closes the client's connection without a byte of answer,
// with a TCP reset where possible: the request was handled, the response is
// lost. Where the connection cannot be hijacked (HTTP/2, recorders) the
// handler aborts instead, which net/http turns into a closed connection or a
// reset stream.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	conn.Close()
}

// reply sets a JSON answer.
func (c *call) reply(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.fail(newError(http.StatusInternalServerError, typeAPI, "internal_error", err.Error()))
		return
	}
	c.status, c.respBody = status, b
}

// fail sets an error answer.
func (c *call) fail(e *apiError) {
	c.status, c.respBody = e.status, e.body(c.requestID)
}

// abandon marks the call as unanswerable: the client left or the server is
// closing. It is recorded as 499 and nothing is written.
func (c *call) abandon() { c.abandoned = true }

func (s *Server) logRequest(c *call, took time.Duration) {
	attrs := []any{
		"request_id", c.requestID,
		"method", c.r.Method,
		"path", c.r.URL.Path,
		"status", c.rec.Status,
		"took", took.Round(time.Microsecond).String(),
	}
	if c.rec.KeyPrefix != "" {
		attrs = append(attrs, "api_key", c.rec.KeyPrefix)
	}
	if c.hasKey {
		attrs = append(attrs, "idempotency_key", c.idemKey)
	}
	if c.rec.Replayed {
		attrs = append(attrs, "replayed", true)
	}
	if c.rec.RateLimited {
		attrs = append(attrs, "rate_limited", true)
	}
	if c.rec.Fault != "" {
		attrs = append(attrs, "fault", c.rec.Fault)
	}
	if c.rec.Rejected > 0 {
		attrs = append(attrs, "rejected", c.rec.Rejected)
	}
	if c.rec.Dropped {
		attrs = append(attrs, "dropped", true)
	}
	s.logger.Info("request", attrs...)
}
