package httpserver

import (
	"context"
	"crypto/subtle"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultReadyTimeout bounds the readiness check.
const DefaultReadyTimeout = 2 * time.Second

// UIPrefix is where the River UI is mounted.
const UIPrefix = "/riverui"

// OutboxPrefix is where the outbox page is mounted.
const OutboxPrefix = "/outbox"

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
	// OutboxUI serves OutboxPrefix and below (the outbox page), with the
	// prefix still on the path; nil leaves it out.
	OutboxUI http.Handler
	// UIToken, when set, is required on every River UI and outbox page
	// request: one or more tokens, comma-separated, each SECRET or
	// NAME:SECRET (see ParseTokens).
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
	tokens := ParseTokens(opts.UIToken)
	// Without a token, only loopback can reach the UIs (the command
	// refuses to listen elsewhere), and only by a loopback name: a
	// DNS-rebinding page would otherwise read and drive them from the
	// operator's browser (see RequireLocalHost). With a token, the token
	// decides and any Host (a proxy, a DNS name) is fine.
	local := func(next http.Handler) http.Handler { return next }
	if len(tokens) == 0 {
		local = RequireLocalHost
	}
	// The UIs change jobs and intents with POST, PUT and PATCH: refuse those
	// from other origins, so a web page open in the operator's browser
	// cannot drive a UI on localhost.
	guard := func(next http.Handler) http.Handler {
		return local(http.NewCrossOriginProtection().Handler(RequireTokens(tokens, next)))
	}
	if opts.RiverUI != nil {
		ui := guard(opts.RiverUI)
		h.mux.Handle(UIPrefix, ui)
		h.mux.Handle(UIPrefix+"/", ui)
	}
	if opts.OutboxUI != nil {
		ui := guard(opts.OutboxUI)
		h.mux.Handle(OutboxPrefix, local(http.RedirectHandler(OutboxPrefix+"/", http.StatusMovedPermanently)))
		h.mux.Handle(OutboxPrefix+"/", ui)
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

// Token is one UI token: a secret and the name the logs give whoever
// presents it.
type Token struct {
	Name   string
	Secret string
}

// DefaultTokenName names a token given without a name.
const DefaultTokenName = "token"

var tokenName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// ParseTokens reads a UI token value (SENDONCE_UI_TOKEN, or the content of
// the file --ui-token-file names): tokens separated by commas, each
// either SECRET (named "token") or NAME:SECRET, where NAME is 1 to 64
// letters, digits, "_", ".", "@" or "-". A value whose part before the first
// colon is no such name (or whose secret would be empty) is a secret as a
// whole. So each operator can have a token of their own, and the outbox
// page logs who acted by the name, never the secret.
func ParseTokens(v string) []Token {
	var out []Token
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		t := Token{Name: DefaultTokenName, Secret: part}
		if name, secret, ok := strings.Cut(part, ":"); ok && secret != "" && tokenName.MatchString(name) {
			t = Token{Name: name, Secret: secret}
		}
		out = append(out, t)
	}
	if len(out) == 0 && strings.TrimSpace(v) != "" {
		// Only commas: still a token, never an open UI.
		out = []Token{{Name: DefaultTokenName, Secret: v}}
	}
	return out
}

type whoKey struct{}

// Who returns the name of the token a request passed RequireTokens with,
// or "" when no token is configured.
func Who(ctx context.Context) string {
	s, _ := ctx.Value(whoKey{}).(string)
	return s
}

// RequireToken guards next with a single unnamed token (see RequireTokens).
func RequireToken(token string, next http.Handler) http.Handler {
	return RequireTokens(ParseTokens(token), next)
}

// RequireTokens guards next with tokens: a request passes with
// "Authorization: Bearer SECRET", or with SECRET as the password of HTTP
// basic authentication (any user name), and gets 401 otherwise; the name of
// the token it passed with is in its context (Who). No tokens let every
// request through.
func RequireTokens(tokens []Token, next http.Handler) http.Handler {
	if len(tokens) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got string
		if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		} else if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			got = strings.TrimSpace(auth[7:])
		}
		who := ""
		for _, t := range tokens {
			// Compare with every token, so the time taken tells nothing.
			if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(t.Secret)) == 1 && who == "" {
				who = t.Name
			}
		}
		if who == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="sendonce", charset="UTF-8"`)
			writeText(w, http.StatusUnauthorized, "unauthorized: the River UI and the outbox page need the token sendonce work was given (SENDONCE_UI_TOKEN or --ui-token-file), as Authorization: Bearer TOKEN or as the basic-auth password")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), whoKey{}, who)))
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
