package worker

import (
	"github.com/sendonce/sendonce/internal/base/unsub"

	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// This file is the worker's configuration: Config and SendConfig, their
// defaults (withDefaults) and their checks (validate), apart from New,
// which only wires.

// Defaults for Config.
const (
	DefaultConcurrency   = 100
	DefaultJobTimeout    = 5 * time.Minute
	DefaultFetchCooldown = 20 * time.Millisecond
	// DefaultFetchPollInterval is River's job poll with LISTEN: the jobs
	// the worker runs (batches, the drain report) are inserted with
	// River's notification, so the poll is only the net under a missed
	// one. Polling (PollOnly) the default is River's, 1 s.
	DefaultFetchPollInterval = 10 * time.Second
	DefaultSweepInterval     = time.Second
	DefaultPruneInterval     = time.Minute
	DefaultRetainKeys        = 365 * 24 * time.Hour
	DefaultLease             = sendstate.DefaultLease
)

// KeepKeysForever, as Config.RetainKeys, keeps the tombstones of pruned
// intents for ever.
const KeepKeysForever time.Duration = -1

// Config configures a Worker.
type Config struct {
	// Client sends the intents. Nil: client.New(), configured from the
	// environment.
	Client *client.Client
	// Queue is the River queue worked (default outbox.DefaultQueue).
	Queue string
	// Concurrency is how many sends run at once in this process (default
	// 100). Sends wait on the network, so this can be far above the cores.
	Concurrency int
	// JobTimeout bounds one attempt, the client's own retries included
	// (default 5 min: three 30 s attempts and up to two 60 s Retry-After
	// waits fit in it).
	JobTimeout time.Duration
	// RescueAfter is how long a job may stay running before River's
	// rescuer takes it for dead (its worker crashed) and runs it again;
	// it must exceed JobTimeout (default JobTimeout + 1 min). After a
	// crash the interrupted sends are replayed sooner, once the dead
	// worker's Lease ends; this is the bound for a job whose worker
	// holds no lease (a River client of the application's own).
	RescueAfter time.Duration
	// FetchCooldown is the least time between two fetches of jobs (default
	// 20 ms; River's own default of 100 ms caps throughput near
	// Concurrency×10 per second).
	FetchCooldown time.Duration
	// FetchPollInterval is how often to look for jobs when no notification
	// arrives (default DefaultFetchPollInterval, 10 s; with PollOnly,
	// River's default, 1 s).
	FetchPollInterval time.Duration
	// SweepInterval is the sweeper's beat (default 1 s): with PollOnly, how
	// often the drain looks for due rows and the fleet's duties run; with
	// LISTEN, the drain wakes at notifications and due times and looks every
	// 30 sweeps besides, and the fleet's duties run when something calls
	// for them (a lease's end, a schedule's time) or every 10 to 60 sweeps.
	SweepInterval time.Duration
	// RateLimits are the provider's limits on send requests for the API
	// key (e.g. 10/s and 500/m, or the quota 50000/d; see ParseRateLimits
	// and RateLimit.IsQuota). Rates pace, quotas count: the fleet sends at
	// the tightest rate, and a quota's count, shared by the fleet, pauses
	// it until the quota resets once it is used up. Every worker using
	// the same database and API key shares one budget that keeps them all,
	// at the most generous rate configured on a worker that leased in the
	// last minute; a worker given lower limits paces only its own sends.
	// Empty: the fleet starts slow (10/s) and ramps up until the API's
	// 429s say it is over the limit, then finds the limit from them.
	RateLimits []RateLimit
	// QuotaZone is the time zone whose calendar days and months the quotas
	// of RateLimits count in (default UTC, where the email APIs we know
	// reset theirs). Give every worker of a key the same.
	QuotaZone *time.Location
	// Lease is how long this worker instance's liveness lease lasts past
	// its last heartbeat, by the database's clock (default DefaultLease,
	// 3 s; it is renewed three times a lease). A worker that dies is found
	// dead when its lease ends, and the intents it left sending are sent
	// again (replayed) just after, the fleet's sweeper sweeping at that
	// end; a worker that
	// cannot renew it for that long (paused, cut off from the database)
	// stops its sends and records nothing for intents another worker took
	// over.
	Lease time.Duration
	// RestartGrace is how long after the database server starts the
	// worker waits before it ends a lapsed lease (default
	// sendstate.DefaultRestartGrace): heartbeats cannot reach a server
	// that is down, and live workers renew as they reconnect.
	RestartGrace time.Duration
	// Coalesce, when 2 or more, gathers up to that many email intents
	// (kind email only) into one POST /emails/batch request under a key of
	// the batch's own, frozen before its first attempt: one request, and
	// one token of the rate budget, for many emails. At most MaxCoalesce
	// (100). Zero: every intent is sent alone. The drain's intents (those
	// without a River job of their own) are gathered too, one queue and run
	// at a time, from when they come due.
	Coalesce int
	// CoalesceWait is how long a partial batch waits to fill (default
	// DefaultCoalesceWait, 200 ms): no intent is held longer before it is
	// sent, alone if no other came. A drained intent's wait runs from when
	// it comes due (its insert, its send_at), and one alone goes
	// sendstate.CoalesceGrace (a tenth of a second) after it.
	CoalesceWait time.Duration
	// OnStatus, when set, is called with the transaction that records
	// the transitions of intents this worker makes, before it commits, so
	// that the application's own writes commit with them or not at all
	// (see outbox.StatusHook). This worker tells it of the intents it
	// records sent. An error from it rolls the recording back, which is
	// then tried again as a failed recording is: the intent goes out again
	// under its key, which the API replays.
	OnStatus outbox.StatusHook
	// Producers are the Go producers of recurring runs, by the name a
	// schedule gives (outbox.Schedule.Producer). A schedule naming a
	// producer this worker lacks is left to a worker that has it.
	Producers map[string]Producer
	// Retain, when positive, turns on retention: every PruneInterval, one
	// worker of the fleet at a time deletes the settled intents (sent,
	// failed, canceled) settled longer than Retain ago, their events, and
	// the settled batches and done runs left without members, in small
	// transactions (see sendstate.Prune). Each pruned intent leaves a
	// tombstone of its key, so enqueueing the key again is still the
	// existing intent or a key-reuse error, never a second send. Zero: off.
	Retain time.Duration
	// RetainKeys is how long the tombstones are kept (default
	// DefaultRetainKeys, one year); KeepKeysForever keeps them for ever.
	RetainKeys time.Duration
	// PruneInterval is how often retention runs (default
	// DefaultPruneInterval).
	PruneInterval time.Duration
	// PollOnly makes the worker poll instead of LISTENing for PostgreSQL
	// notifications, for a database behind a transaction-mode pooler
	// (PgBouncer), where LISTEN does not work: River fetches jobs every
	// FetchPollInterval, and the sweeper looks for rows inserted by SQL
	// every SweepInterval. A send then starts up to FetchPollInterval
	// after its commit instead of at once. Behind a transaction-mode
	// pooler the pool given to New must also name no prepared statements
	// (pgx.QueryExecModeExec as its ConnConfig.DefaultQueryExecMode, or
	// default_query_exec_mode=exec in its URL): River's statements and the
	// worker's run in the pool's mode (sendonce work --pooler transaction
	// sets both).
	PollOnly bool
	// Send tunes the outcome mapping.
	Send SendConfig
	// TracerProvider records the worker's spans: River's job span (from
	// River's OpenTelemetry middleware), the send span in it, the claim and
	// the client's HTTP attempts (see docs/tracing-and-metrics.md). Nil: the global
	// provider (otel.GetTracerProvider), a no-op unless the program set one.
	TracerProvider trace.TracerProvider
	// Logger receives the worker's and River's logs: one line per outcome
	// (sent, retry, failed...) with the key, kind, attempt and job id, and
	// warnings. Nil: slog.Default(), as River does; to silence the worker,
	// give it slog.New(slog.DiscardHandler).
	Logger *slog.Logger

	// now, when set (by tests), is the clock the budget counts quotas
	// by, instead of the database's: a test moves it past midnight.
	now func() time.Time
	// reportInterval, when set (by tests), is how often the worker writes
	// its DrainReportArgs job instead of DefaultReportInterval.
	reportInterval time.Duration
}

// orDefault sets *v to d when it is zero or negative: unset.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// withDefaults is cfg with every zero field that has a default set to it.
// The Send settings keep their zeros, but for the Logger (SendConfig's own
// withDefaults fills them), so validate sees what was asked.
func (cfg *Config) withDefaults() Config {
	out := *cfg
	if out.Queue == "" {
		out.Queue = outbox.DefaultQueue
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	orDefault(&out.JobTimeout, DefaultJobTimeout)
	orDefault(&out.RescueAfter, out.JobTimeout+time.Minute)
	orDefault(&out.Concurrency, DefaultConcurrency)
	orDefault(&out.FetchCooldown, DefaultFetchCooldown)
	if out.FetchPollInterval == 0 && !out.PollOnly {
		out.FetchPollInterval = DefaultFetchPollInterval
	}
	orDefault(&out.SweepInterval, DefaultSweepInterval)
	orDefault(&out.reportInterval, DefaultReportInterval)
	orDefault(&out.RestartGrace, sendstate.DefaultRestartGrace)
	if out.Lease == 0 {
		out.Lease = DefaultLease
	}
	if out.Send.Logger == nil {
		out.Send.Logger = out.Logger
	}
	if out.CoalesceWait == 0 {
		out.CoalesceWait = DefaultCoalesceWait
	}
	if out.RetainKeys == 0 {
		out.RetainKeys = DefaultRetainKeys
	}
	orDefault(&out.PruneInterval, DefaultPruneInterval)
	if out.TracerProvider == nil {
		out.TracerProvider = otel.GetTracerProvider()
	}
	return out
}

// validate refuses a Config (with its defaults) that New cannot honour,
// naming what was wrong.
func (cfg *Config) validate() error {
	if cfg.RescueAfter <= cfg.JobTimeout {
		return fmt.Errorf("worker: Config.RescueAfter (%s) must exceed Config.JobTimeout (%s)", cfg.RescueAfter, cfg.JobTimeout)
	}
	if err := cfg.Send.validate(); err != nil {
		return err
	}
	if cfg.Lease < 500*time.Millisecond {
		return fmt.Errorf("worker: Config.Lease %s: want 500ms or more (0: the default, %s)", cfg.Lease, DefaultLease)
	}
	for _, l := range cfg.RateLimits {
		if err := l.check(); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if cfg.Coalesce < 0 || cfg.Coalesce > MaxCoalesce {
		return fmt.Errorf("worker: Config.Coalesce %d: want 0 (off) to %d, the API's batch limit", cfg.Coalesce, MaxCoalesce)
	}
	if cfg.CoalesceWait < 0 {
		return fmt.Errorf("worker: Config.CoalesceWait %s: want a positive duration", cfg.CoalesceWait)
	}
	if cfg.Retain < 0 {
		return fmt.Errorf("worker: Config.Retain %s: want a positive duration, or 0 for off", cfg.Retain)
	}
	if cfg.RetainKeys < 0 && cfg.RetainKeys != KeepKeysForever {
		return fmt.Errorf("worker: Config.RetainKeys %s: want a positive duration, 0 for the default or KeepKeysForever", cfg.RetainKeys)
	}
	for name, p := range cfg.Producers {
		if p == nil {
			return fmt.Errorf("worker: Config.Producers[%q] is nil", name)
		}
	}
	return nil
}

// validate refuses SendConfig settings the worker cannot honour. Zeros
// are the defaults (withDefaults).
func (c *SendConfig) validate() error {
	if c.MaxAttempts > MaxAttempts {
		return fmt.Errorf("worker: SendConfig.MaxAttempts %d: want at most %d, below the River job's own limit of %d",
			c.MaxAttempts, MaxAttempts, sendjob.MaxAttempts)
	}
	if c.ReplayWindow > outbox.MaxReplayWindow {
		return fmt.Errorf("worker: SendConfig.ReplayWindow %s: want at most %s, the time the API keeps an idempotency key",
			c.ReplayWindow, outbox.MaxReplayWindow)
	}
	switch c.PartlySuppressed {
	case "", PartlySuppressedSend, PartlySuppressedPark:
	default:
		return fmt.Errorf("worker: SendConfig.PartlySuppressed %q: want %q or %q",
			c.PartlySuppressed, PartlySuppressedSend, PartlySuppressedPark)
	}
	if c.Unsubscribe != nil {
		if _, err := unsub.New(c.Unsubscribe.URL, c.Unsubscribe.Mailto, c.Unsubscribe.Secret); err != nil {
			return fmt.Errorf("worker: SendConfig.Unsubscribe: %w", err)
		}
	}
	if c.MaxPause < 0 {
		return fmt.Errorf("worker: SendConfig.MaxPause %s: want a positive duration (0: the default, %s)", c.MaxPause, DefaultMaxPause)
	}
	return nil
}

// Defaults for SendConfig.
const (
	DefaultReplayWindow  = outbox.DefaultReplayWindow
	DefaultMaxAttempts   = 10
	DefaultMaxSnoozes    = 20
	DefaultRateLimitWait = 30 * time.Second
	DefaultRetryBase     = time.Second
	DefaultRetryMax      = 10 * time.Minute
	DefaultMaxPause      = budget.DefaultMaxPause
)

// MaxAttempts is the most SendConfig.MaxAttempts may be: one less than the
// River job's own limit.
const MaxAttempts = sendjob.MaxAttempts - 1

// SendConfig tunes how a sendWorker maps outcomes to states.
type SendConfig struct {
	// ReplayWindow bounds, from an intent's first attempt, how long its
	// retries and snoozes may go on, measured on the database's clock; no
	// HTTP attempt starts or goes on past it. At most MaxReplayWindow (24 h). The API honours an idempotency key for
	// a limited time (24 h at the email APIs we know); an attempt after that
	// could deliver a second time, so past the window the intent is parked
	// as failed instead. Default 23 h, an hour short of 24 h.
	ReplayWindow time.Duration
	// MaxAttempts is how many times a send is tried (network errors and 5xx
	// after the client's own retries) before it is parked as failed.
	// Snoozes do not count. Default 10, at most MaxAttempts (below the
	// River job's own limit, so River never discards a job the worker has
	// not given up on).
	MaxAttempts int
	// MaxSnoozes caps how often a send is snoozed for a Retry-After the
	// client would not wait (over a minute, on an error other than 429)
	// before it is parked as failed. A rate limit (429) never parks an
	// intent. Default 20.
	MaxSnoozes int
	// RateLimitWait caps an intent's own backoff after 429s that were not
	// a fleet signal (RetryBase, doubling, jittered; a longer Retry-After
	// is honoured, MaxPause at most); without a budget it is the snooze
	// after a 429 that named no wait. Default 30 s.
	RateLimitWait time.Duration
	// MaxPause bounds how long a 429's Retry-After pauses the fleet (its
	// budget): past it the fleet probes with single requests until the API
	// serves one. No job is snoozed for a 429 or for the budget longer
	// than MaxPause, so a year-long Retry-After, or a pause cleared by
	// hand, leaves no job a year away. Default DefaultMaxPause (5 min).
	MaxPause time.Duration
	// RetryBase and RetryMax shape River's wait before the next attempt:
	// RetryBase·2^(attempt-1), at most RetryMax, less up to 10% jitter.
	// Defaults 1 s and 10 min.
	RetryBase, RetryMax time.Duration
	// PartlySuppressed says what to do with an intent some (not all) of
	// whose recipients are on the suppression list when it is first
	// claimed: send it to the others (PartlySuppressedSend, the default) or
	// park it as suppressed (PartlySuppressedPark). An intent all of whose
	// recipients are suppressed is always parked.
	PartlySuppressed PartlySuppressed
	// Observer, when set, is told of every attempt's outcome.
	Observer Observer
	// Unsubscribe, when set, gives intents with a topic their
	// List-Unsubscribe headers (RFC 8058 one-click). Without it an intent
	// with a topic is parked as failed, never sent without them.
	Unsubscribe *Unsubscribe
	// Logger receives a line per outcome; never the API key or bodies.
	Logger *slog.Logger
}

// Unsubscribe configures the List-Unsubscribe headers of intents with a
// topic (see docs/webhooks.md, Unsubscribe).
type Unsubscribe struct {
	// URL is the public base address of the unsubscribe endpoint (sendonce
	// work --webhook-addr behind its HTTPS name): https://mail.example.com
	// gives links https://mail.example.com/u/TOKEN.
	URL string
	// Mailto, when set, adds <mailto:ADDRESS?subject=unsubscribe%20TOKEN>
	// to List-Unsubscribe; sendonce does not read that mailbox.
	Mailto string
	// Secret signs the tokens (at least 16 characters); never logged.
	Secret string
}

// String names the settings without the secret.
func (u Unsubscribe) String() string {
	return fmt.Sprintf("worker.Unsubscribe{URL: %q, Mailto: %q, Secret: [redacted]}", u.URL, u.Mailto)
}

// GoString is String.
func (u Unsubscribe) GoString() string { return u.String() }

func (c *SendConfig) withDefaults() SendConfig {
	out := *c
	orDefault(&out.ReplayWindow, DefaultReplayWindow)
	out.ReplayWindow = min(out.ReplayWindow, outbox.MaxReplayWindow)
	orDefault(&out.MaxAttempts, DefaultMaxAttempts)
	out.MaxAttempts = min(out.MaxAttempts, MaxAttempts)
	orDefault(&out.MaxSnoozes, DefaultMaxSnoozes)
	orDefault(&out.RateLimitWait, DefaultRateLimitWait)
	orDefault(&out.MaxPause, DefaultMaxPause)
	orDefault(&out.RetryBase, DefaultRetryBase)
	orDefault(&out.RetryMax, DefaultRetryMax)
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}
