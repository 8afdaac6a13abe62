package httpserver

import (
	"context"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultReadyTimeout bounds the readiness check.
const DefaultReadyTimeout = 2 * time.Second

// UIPrefix is where the River UI is mounted.
const UIPrefix = "/riverui"

// Options configure the handler. Every field is optional.
type Options struct {
	// Ready reports whether the process can do its work (the database
	// answers); its error, which must not hold a secret, is the 503's body.
	// Nil: always ready.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds Ready (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// RiverUI serves UIPrefix and below, with the prefix still on the path
	// (as riverui.Handler expects with HandlerOpts.Prefix set to UIPrefix);
	// nil leaves it out.
	RiverUI http.Handler
	// UIToken, when set, is required on every River UI request.
	UIToken string
}

// Handler serves the operations endpoints. Make it with New.
type Handler struct {
	mux      *http.ServeMux
	opts     Options
	draining atomic.Bool
}

// New returns the handler for opts.
func New(opts Options) *Handler {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	h := &Handler{mux: http.NewServeMux(), opts: opts}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	h.mux.HandleFunc("GET /readyz", h.ready)
	if opts.Metrics != nil {
		h.mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.RiverUI != nil {
		// The UI's API changes jobs with POST, PUT and PATCH: refuse those
		// from other origins, so a web page open in the operator's browser
		// cannot drive a UI on localhost.
		ui := http.NewCrossOriginProtection().Handler(RequireToken(opts.UIToken, opts.RiverUI))
		h.mux.Handle(UIPrefix, ui)
		h.mux.Handle(UIPrefix+"/", ui)
	}
	return h
}

// ServeHTTP routes a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// SetDraining makes /readyz answer 503 from now on: the process is shutting
// down and should get no new work routed to it.
func (h *Handler) SetDraining() { h.draining.Store(true) }

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() {
		writeText(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	if h.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReadyTimeout)
		defer cancel()
		if err := h.opts.Ready(ctx); err != nil {
			writeText(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	writeText(w, http.StatusOK, "ok")
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}

// RequireToken guards next with token: a request passes with
// "Authorization: Bearer TOKEN", or with TOKEN as the password of HTTP
// basic authentication (any user name), and gets 401 otherwise. An empty
// token lets every request through.
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got string
		if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		} else if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			got = strings.TrimSpace(auth[7:])
		}
		if got == "" || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="sendonce", charset="UTF-8"`)
			writeText(w, http.StatusUnauthorized, "unauthorized: the River UI needs the token given by --ui-token (Authorization: Bearer, or as the basic-auth password)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether a listen address ("host:port") accepts only
// local connections: its host is "localhost" or a loopback IP. An empty
// host listens on every interface and is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
