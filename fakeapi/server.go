package fakeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// ErrClosed is returned by waits that were cut short because the server closed.
var ErrClosed = errors.New("fakeapi: server closed")

// Server is one fake OpenEmail API: its messages, idempotency keys, delivery
// ledger, request log and fault rules. All methods are safe for concurrent use.
type Server struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
	seed   int64

	// mu guards everything below it. The fake is small; one lock keeps claim,
	// delivery and ledger in step without reasoning about lock order.
	mu           sync.Mutex
	rng          *rand.Rand
	faults       []Fault
	faultUses    map[faultUse]int
	keys         map[keyScope]*keyEntry
	lastSweep    time.Time
	messages     map[string]*message
	order        []*message // creation order
	scheduled    map[string]*message
	deliveries   []Delivery
	requests     []*RequestRecord
	buckets      map[bucketKey]*bucket    // the rate limiter's, per API key and limit
	rateLimited  int                      // requests the limiter refused
	quotaUsed    map[quotaKey]*quotaCount // the quotas' counts, per API key and quota
	quotaRefused int                      // requests a quota refused
	changed      chan struct{}            // closed and replaced whenever a delivery or answer is recorded
	seq          int64
	httpServer   *http.Server
	baseURL      string

	// The webhook sender's queue and record (see webhooks.go).
	events       []*outEvent
	webhooks     []WebhookAttempt
	webhooksSent int
	webhookGen   int // bumped by a reset, so events queued before it are forgotten

	webhookWake    chan struct{} // a new event was queued; nil without a webhook URL
	webhookStopped chan struct{} // closed when the sender has stopped

	closeOnce sync.Once
	closed    chan struct{}

	// testHook, when set by tests in this package, is called at points a
	// test must wait for or hold: "claimed" (a key was claimed and nothing is
	// delivered yet) and "waiting" (a request waits for a key in progress).
	testHook func(event string)
}

// New returns a Server configured by cfg. It starts the scheduler loop that
// promotes due scheduled sends, so call Close when done even if Start was never
// called. With cfg.WebhookURL it also starts the webhook sender. New panics
// if cfg.Faults holds an invalid rule, cfg.Rate an invalid limit or the
// webhook settings are invalid (Config.Check reports the same as an error).
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	faults, err := checkFaults(cfg.Faults)
	if err != nil {
		panic("fakeapi: " + err.Error())
	}
	cfg.Faults = faults
	if err := checkRate(cfg.Rate); err != nil {
		panic("fakeapi: " + err.Error())
	}
	cfg.Rate = slices.Clone(cfg.Rate)
	if err := checkWebhook(cfg.WebhookURL, cfg.WebhookSecret); err != nil {
		panic("fakeapi: " + err.Error())
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Int64N(1<<53) + 1
	}
	s := &Server{
		cfg:    cfg,
		logger: cfg.Logger,
		now:    cfg.Now,
		seed:   seed,
		closed: make(chan struct{}),
	}
	s.resetLocked()
	attrs := []any{"seed", seed, "faults", len(faults), "key_window", cfg.KeyWindow.String()}
	if len(cfg.Rate) > 0 {
		attrs = append(attrs, "rate", formatRate(cfg.Rate))
	}
	if cfg.WebhookURL != "" {
		u, _ := url.Parse(cfg.WebhookURL)
		attrs = append(attrs, "webhook_url", u.Redacted()) // never the secret
	}
	s.logger.Info("fake OpenEmail API ready", attrs...)
	go s.runScheduler(cfg.SchedulerInterval)
	s.startWebhooks()
	return s
}

// resetLocked puts the server back in its starting state: no messages, keys,
// deliveries or requests, full rate buckets, the configured faults, and the RNG restarted from
// the current seed.
func (s *Server) resetLocked() {
	s.rng = rand.New(rand.NewPCG(uint64(s.seed), 0))
	s.faults = s.cfg.Faults
	s.faultUses = map[faultUse]int{}
	s.keys = map[keyScope]*keyEntry{}
	s.messages = map[string]*message{}
	s.order = nil
	s.scheduled = map[string]*message{}
	s.deliveries = nil
	s.requests = nil
	s.buckets = map[bucketKey]*bucket{}
	s.rateLimited = 0
	s.quotaUsed = map[quotaKey]*quotaCount{}
	s.quotaRefused = 0
	s.events = nil
	s.webhooks = nil
	s.webhooksSent = 0
	s.webhookGen++
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
}

// Reset clears all state, as POST /_fake/reset does: the rate limiter's
// buckets are full again and its count is zero.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

// Seed is the seed in use for probabilistic faults: Config.Seed, or the one
// New picked when that was zero.
func (s *Server) Seed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seed
}

// Handler returns the fake as an http.Handler, for mounting in a server of
// your own. drop_after needs a connection it can hijack (any HTTP/1 server).
func (s *Server) Handler() http.Handler { return s }

// Start listens on addr (for example "127.0.0.1:0") and serves in the
// background. It returns the base URL clients should use; an unspecified host
// (0.0.0.0, ::) is reported as loopback, since clients refuse those hosts.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fakeapi: listen %s: %w", addr, err)
	}
	s.mu.Lock()
	if s.httpServer != nil || s.isClosed() {
		s.mu.Unlock()
		ln.Close()
		return "", errors.New("fakeapi: server already started or closed")
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	s.httpServer = hs
	s.baseURL = "http://" + reachableAddr(addr, ln.Addr().(*net.TCPAddr))
	url := s.baseURL
	s.mu.Unlock()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serve", "err", err)
		}
	}()
	s.logger.Info("listening", "url", url)
	return url, nil
}

// reachableAddr renders the address listening for requested as one a client
// may dial: an unspecified host becomes 127.0.0.1, or [::1] when "::" was
// asked for.
func reachableAddr(requested string, a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
		if host, _, _ := net.SplitHostPort(requested); host == "::" {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// URL is the base URL returned by Start, or "" before it.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseURL
}

// Shutdown stops accepting requests and waits for those in flight to finish
// (a latency fault can make that long), then closes. If ctx ends first, the
// remaining requests are cut off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs := s.httpServer
	s.mu.Unlock()
	var err error
	if hs != nil {
		err = hs.Shutdown(ctx)
	}
	s.Close()
	return err
}

// Close stops the server at once: listeners and connections close, latency
// faults in progress end without an answer, waits return ErrClosed, and the
// webhook sender stops (an attempt in flight is cut off, queued events are
// never sent); Close returns once it has.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.mu.Lock()
		hs := s.httpServer
		s.mu.Unlock()
		if hs != nil {
			hs.Close()
		}
		if s.webhookStopped != nil {
			<-s.webhookStopped
		}
	})
}

// NewTest starts a Server on a loopback port for the duration of a test and
// closes it in t.Cleanup; the base URL is srv.URL(). It logs the URL and the
// seed with t.Logf, so a failing run shows how to repeat its faults.
func NewTest(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := New(cfg)
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatalf("fakeapi: %v", err)
	}
	t.Cleanup(s.Close)
	t.Logf("fakeapi: fake OpenEmail API on %s, seed %d", url, s.seed)
	return s
}

func (s *Server) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// pause waits d and reports whether it did; it returns false early if the
// request's client went away or the server closed.
func (s *Server) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}

// notifyLocked wakes every WaitDeliveries and WaitRequests.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
