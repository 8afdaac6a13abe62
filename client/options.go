package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
)

// Defaults for the options of New.
const (
	// DefaultMaxRetries is how many extra attempts a repeatable call gets.
	DefaultMaxRetries = 2
	// DefaultTimeout bounds each attempt, afresh for every retry.
	DefaultTimeout = 30 * time.Second
)

// Environment variables read by New when the matching option is not given.
// An empty value counts as unset.
const (
	EnvAPIKey  = "OPENEMAIL_API_KEY"
	EnvBaseURL = "OPENEMAIL_BASE_URL"
)

// apiKeyPrefixes are the two shapes of API key; anything else is refused at
// New, before it could be sent anywhere.
var apiKeyPrefixes = []string{"oe_live_", "oe_test_"}

// Option configures a Client; pass them to New.
type Option func(*config) error

// config is everything New resolves. It holds the API key, so it formats and
// logs as redacted (see secret.go).
type config struct {
	apiKey     secret
	apiKeySet  bool
	baseURL    string
	baseURLSet bool
	maxRetries int
	timeout    time.Duration
	httpClient *http.Client
	userAgent  string
	logger     *slog.Logger
	sleep      func(ctx context.Context, d time.Duration) error
	now        func() time.Time
}

// WithAPIKey sets the API key (oe_live_… or oe_test_…). Without it New reads
// OPENEMAIL_API_KEY. An empty key is an error rather than a fallback to the
// environment, so a missing variable in the caller's own configuration is not
// silently replaced by another.
func WithAPIKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return fmt.Errorf("%w: WithAPIKey was given an empty key", ErrInvalidAPIKey)
		}
		c.apiKey, c.apiKeySet = newSecret(key), true
		return nil
	}
}

// WithBaseURL sets the API's base URL. Without it New reads
// OPENEMAIL_BASE_URL, and then uses DefaultBaseURL. A value without scheme
// gets http:// for loopback hosts and https:// otherwise.
func WithBaseURL(u string) Option {
	return func(c *config) error {
		if strings.TrimSpace(u) == "" {
			return fmt.Errorf("%w: WithBaseURL was given an empty URL", ErrInvalidBaseURL)
		}
		c.baseURL, c.baseURLSet = u, true
		return nil
	}
}

// WithMaxRetries sets how many extra attempts a repeatable call gets after a
// retryable failure (default 2, so up to three attempts). 0 turns retries off;
// a negative value counts as 0.
func WithMaxRetries(n int) Option {
	return func(c *config) error {
		c.maxRetries = max(n, 0)
		return nil
	}
}

// WithTimeout bounds each attempt (default 30s): every retry gets the full
// timeout afresh, so a call that spends both retries can take three timeouts
// plus the waits between them. 0 means no per-attempt timeout; bound the whole
// call with the context instead or as well. Negative is an error.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("client: WithTimeout: negative timeout")
		}
		c.timeout = d
		return nil
	}
}

// WithHTTPClient sets the HTTP client that carries requests. The client is
// copied and redirects are turned off on the copy: the API never redirects,
// and following one could carry the key elsewhere; a 3xx becomes an
// *APIError. Its own Timeout, if any, applies on top of WithTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil client")
		}
		c.httpClient = hc
		return nil
	}
}

// WithUserAgent replaces the User-Agent header (default "sendonce-go/" +
// Version).
func WithUserAgent(ua string) Option {
	return func(c *config) error {
		if strings.ContainsAny(ua, "\r\n\x00") {
			return errors.New("client: WithUserAgent: control character in user agent")
		}
		c.userAgent = ua
		return nil
	}
}

// WithLogger sets a logger for debug records of each attempt and retry:
// call, method, path, attempt, status, wait. It never logs the API key,
// request or response bodies, or query strings. The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("client: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithSleep replaces how the client waits between attempts, for tests and
// for callers who need determinism. The function must return early with
// ctx.Err() when ctx is done: a cancelled call must not sit out its backoff.
// The client also checks ctx after it returns. The default waits on a timer
// and ctx together.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) error {
		if sleep == nil {
			return errors.New("client: WithSleep: nil func")
		}
		c.sleep = sleep
		return nil
	}
}

// WithNow replaces the clock used to turn an HTTP-date Retry-After into a
// wait. The default is time.Now.
func WithNow(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("client: WithNow: nil func")
		}
		c.now = now
		return nil
	}
}

// sleepContext is the default sleep: a timer raced against ctx.
func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// resolveConfig applies options over defaults and the environment, and
// validates the result.
func resolveConfig(opts []Option) (*config, *baseURL, error) {
	c := &config{
		maxRetries: DefaultMaxRetries,
		timeout:    DefaultTimeout,
		userAgent:  "sendonce-go/" + Version,
		logger:     slog.New(slog.DiscardHandler),
		sleep:      sleepContext,
		now:        time.Now,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return nil, nil, err
		}
	}

	if !c.apiKeySet {
		if v := os.Getenv(EnvAPIKey); v != "" {
			c.apiKey, c.apiKeySet = newSecret(v), true
		}
	}
	if !c.apiKeySet {
		return nil, nil, ErrNoCredential
	}
	if !hasAPIKeyPrefix(c.apiKey.reveal()) {
		// Say where the key came from but never what it is.
		return nil, nil, fmt.Errorf("%w: it must start with oe_live_ or oe_test_", ErrInvalidAPIKey)
	}
	if strings.ContainsFunc(c.apiKey.reveal(), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, nil, fmt.Errorf("%w: it contains whitespace or control characters", ErrInvalidAPIKey)
	}

	raw := c.baseURL
	if !c.baseURLSet {
		raw = os.Getenv(EnvBaseURL)
		if raw == "" {
			raw = DefaultBaseURL
		}
	}
	base, err := parseBaseURL(raw)
	if err != nil {
		return nil, nil, err
	}

	hc := &http.Client{Transport: defaultTransport()}
	if c.httpClient != nil {
		copied := *c.httpClient
		hc = &copied
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.httpClient = hc
	return c, base, nil
}

// defaultIdleConnsPerHost is how many idle connections to the API the
// default transport keeps. Go's default of 2 makes a client shared by many
// goroutines (a worker sending 100 emails at once) open a new connection,
// and a new TLS session, for almost every request.
const defaultIdleConnsPerHost = 256

// defaultTransport is http.DefaultTransport with room for that many idle
// connections, used when the caller gives no HTTP client of its own.
func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = defaultIdleConnsPerHost
	t.MaxIdleConnsPerHost = defaultIdleConnsPerHost
	return t
}

func hasAPIKeyPrefix(key string) bool {
	for _, p := range apiKeyPrefixes {
		if strings.HasPrefix(key, p) && len(key) > len(p) {
			return true
		}
	}
	return false
}
