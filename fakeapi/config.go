package fakeapi

import (
	"log/slog"
	"time"
)

// Defaults applied by New to the zero fields of a Config.
const (
	DefaultKeyWindow         = 24 * time.Hour
	DefaultMaxBodyBytes      = 10 << 20
	DefaultSchedulerInterval = 100 * time.Millisecond
)

// Config configures a Server. The zero value is a working fake: any oe_test_
// or oe_live_ key, a 24 h idempotency window, 10 MiB bodies, no faults.
type Config struct {
	// APIKeys, when not empty, is the only set of API keys accepted; any other
	// well-formed key is refused with 401 invalid_api_key. When empty, every
	// key of the form oe_test_… or oe_live_… is accepted.
	APIKeys []string

	// KeyWindow is how long an idempotency key is remembered after it was
	// claimed. After it, the same key sends again. Default 24 h.
	KeyWindow time.Duration

	// MaxBodyBytes is the largest request body accepted; a larger one is
	// answered 413. Default 10 MiB.
	MaxBodyBytes int64

	// Faults are the fault rules applied from the start (and again after
	// POST /_fake/reset). New panics on an invalid rule; build rules from
	// text with ParseFault or ParseFaults to get an error instead.
	Faults []Fault

	// Seed seeds the random numbers behind probabilistic faults (p=…). Zero
	// picks a seed, which Server.Seed reports and New logs, so any run can be
	// repeated by passing that seed back.
	Seed int64

	// Rate, when not empty, limits the requests of each API key: every limit
	// must hold, each a token bucket per API key (see RateLimit). Every
	// authenticated API request counts, whatever it asks for; requests
	// refused before authentication and the /_fake/ control endpoints do
	// not. A request over a limit is answered 429 rate_limit_error, code
	// rate_limited, before anything else is done with it. Build it from text
	// with ParseRate ("10/s,500/m"). New panics on an invalid limit.
	Rate []RateLimit

	// RateRetryAfter makes a 429 of the limiter carry Retry-After: the whole
	// seconds, rounded up, until the key's next request would pass. The API
	// sends none on a 429 (retry-contract.md §3), so neither does the fake by
	// default.
	RateRetryAfter bool

	// RateHeaders makes every answer to a limited request, passed or refused,
	// carry the IETF draft fields RateLimit-Limit (the bucket's capacity),
	// RateLimit-Remaining (whole tokens left) and RateLimit-Reset (whole
	// seconds until the bucket is full). With several limits they describe
	// the one closest to refusing. The API is not known to send them.
	RateHeaders bool

	// Quota, when not empty, counts the requests of each API key per
	// calendar day or month in UTC (see Quota and ParseQuota): a request
	// past a quota is answered 429 daily_quota_exceeded (or
	// monthly_quota_exceeded) with Retry-After until the reset. It counts
	// what the rate limiter passed.
	Quota []Quota

	// Now is the fake's clock, used for idempotency expiry, scheduled sends,
	// timestamps, Retry-After dates and the rate limiter's refills. Default time.Now. Tests inject a
	// clock they can move.
	Now func() time.Time

	// SchedulerInterval is how often a background loop promotes scheduled
	// sends that have come due (reads promote lazily as well). Default 100 ms.
	SchedulerInterval time.Duration

	// WebhookURL, when set, makes the fake POST a signed webhook event to it
	// for every email it delivers (each email of a batch; not broadcasts):
	// email.delivered, or email.bounced, email.complained, … as the bounce,
	// complain and delay_then_bounce rules say. A sender goroutine posts them
	// in order, asynchronously, retrying a non-2xx answer or a network error
	// (WebhookAttempts, WebhookBackoff). An absolute http or https URL.
	WebhookURL string

	// WebhookSecret signs the events: X-OpenEmail-Signature is
	// t=<unix seconds on Now>,v1=<hex HMAC-SHA256 over "<t>.<body>">, the
	// secret used as raw bytes. Required with WebhookURL. Never logged or
	// recorded.
	WebhookSecret string

	// Logger receives one line per request and the chosen seed. API keys are
	// never logged, only their oe_test_/oe_live_ prefix. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.KeyWindow <= 0 {
		c.KeyWindow = DefaultKeyWindow
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SchedulerInterval <= 0 {
		c.SchedulerInterval = DefaultSchedulerInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
