package client

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// Version is this client's version, sent in the default User-Agent.
const Version = "0.1.0"

// Client talks to the OpenEmail API. It is safe for concurrent use; make one
// and share it.
type Client struct {
	// Emails sends, reads, cancels and reschedules emails.
	Emails *EmailsService
	// Templates sends emails rendered from a stored template.
	Templates *TemplatesService
	// Broadcasts sends, reads and cancels broadcasts to an audience.
	Broadcasts *BroadcastsService

	cfg  *config
	base *baseURL
}

// New makes a Client. It needs an API key, from WithAPIKey or
// OPENEMAIL_API_KEY, starting oe_live_ or oe_test_. Errors never repeat the
// key.
func New(opts ...Option) (*Client, error) {
	cfg, base, err := resolveConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, base: base}
	c.Emails = &EmailsService{c: c}
	c.Templates = &TemplatesService{c: c}
	c.Broadcasts = &BroadcastsService{c: c}
	return c, nil
}

// CheckBaseURL reports, with an error wrapping ErrInsecureBaseURL, whether
// every call would be refused because the base URL is plain http to a host
// off this machine. The rule is enforced on each request; a long-running
// caller (a worker) checks it once at start to fail fast instead.
func (c *Client) CheckBaseURL() error {
	if !secureOrigin(c.base.u) {
		return fmt.Errorf("%w (%s)", ErrInsecureBaseURL, c.base.u.Host)
	}
	return nil
}

// BaseURL returns the normalised base URL requests go to.
func (c *Client) BaseURL() string { return c.base.String() }

// Do sends a request to any endpoint, for the calls this package does not
// wrap. path is appended to the base URL and must start with one '/'; it may
// carry a query. body, when non-nil, is encoded as JSON; out, when non-nil,
// receives the decoded 2xx body (a *json.RawMessage takes it as is).
//
// Retries follow the contract for raw requests: a GET is retried; any other
// method is sent once unless marked with Repeatable. WithIdempotencyKey
// attaches the header.
func (c *Client) Do(ctx context.Context, method, path string, body, out any, opts ...RequestOption) error {
	method = strings.ToUpper(strings.TrimSpace(method))
	if method == "" {
		return fmt.Errorf("%w: empty method", ErrInvalidRequest)
	}
	return c.do(ctx, &request{method: method, path: path, body: body, opts: opts}, out)
}

// String describes the client without its API key.
func (c Client) String() string {
	return fmt.Sprintf("client.Client{baseURL:%q apiKey:%s}", c.base.String(), redacted)
}

// GoString is String, for %#v.
func (c Client) GoString() string { return c.String() }

// Format prints String for every verb. Without it, %+v or %d of a Client
// would print its fields. (The key itself is kept out of reach of fmt in any
// case; see secret.)
func (c Client) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// LogValue logs the client without its API key.
func (c Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.base.String()), slog.String("api_key", redacted))
}

// methodGet and friends keep resource files short.
const (
	methodGet   = http.MethodGet
	methodPost  = http.MethodPost
	methodPatch = http.MethodPatch
)
