package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"riverqueue.com/riverui"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/cmd/internal/base/tracing"
	"github.com/sendonce/sendonce/cmd/internal/ops/metrics"
	"github.com/sendonce/sendonce/cmd/internal/ops/outboxui"
	"github.com/sendonce/sendonce/internal/base/unsub"
	"github.com/sendonce/sendonce/internal/ops/httpserver"
	"github.com/sendonce/sendonce/internal/ops/unsubscribe"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/webhook"
	"github.com/sendonce/sendonce/worker"
)

// envWebhookSecret holds the webhook signing secret(s), comma-separated
// while one is being rotated. There is no flag: flags show in ps.
const envWebhookSecret = "OPENEMAIL_WEBHOOK_SECRET"

// envUnsubscribeSecret signs the one-click unsubscribe tokens, and
// envUnsubscribePrevious holds the secret(s) before it, comma-separated,
// still accepted. There is no flag: flags show in ps.
const (
	envUnsubscribeSecret   = "SENDONCE_UNSUBSCRIBE_SECRET"
	envUnsubscribePrevious = "SENDONCE_UNSUBSCRIBE_SECRET_PREVIOUS"
)

// webhookPath is where --webhook-addr's listener takes deliveries.
const webhookPath = "/webhooks/openemail"

const workLong = `work runs the worker: it sends every committed intent through the OpenEmail API
with the intent's idempotency key, retrying failures with the same key (so a
retry replays rather than repeats) until the intent is sent or parked as
failed. Any number of workers may run against one database.

The API key is read from OPENEMAIL_API_KEY only (oe_live_… or oe_test_…);
there is no flag, because flags show in ps. It is never printed or logged.
work refuses to start when the key is missing or malformed, or when the
database needs migrating (run "sendonce migrate").

Every worker that uses the same database and API key shares one send budget:
--api-rate 10/s (or 600/m, 36000/h, or several: 10/s,500/m) paces them all
together, and a 429 that is a fleet signal (first 429s of intents that are 1%
of the fleet's recent requests) slows them all down; any other 429 backs that one
intent off on its own (1s doubling to --rate-limit-wait, jittered). Without
--api-rate they start at 10/s and ramp up, then find the limit from 429s. A worker
given a lower --api-rate than the others paces only its own sends (and logs
the mismatch once). A Retry-After pauses the fleet for --max-pause at most
(5m); past it the fleet probes with single requests until the API serves one.
A send waits for its budget before it claims its intent, and a 429 never parks
one as failed. "sendonce status" shows the budget.

--coalesce 100 sends email intents (kind email only) up to 100 to a request
of POST /emails/batch, which takes one token of the budget: a rate-limited
billing run finishes in minutes, not hours. A batch gets a key of its own
(sendonce-batch:…) and is frozen, body and members, before its first attempt,
so every retry, on any worker and after any crash, replays the same request.
A partial batch waits --coalesce-wait to fill; a lone intent goes alone.

Addresses on the suppression list (sendonce suppression; bounces and
complaints from --webhook-addr put them there) are looked up when an intent is
first claimed, before any API call: an intent with no recipient left is parked
as suppressed; one partly suppressed is sent to the others, or parked with
--partly-suppressed park.

On SIGINT or SIGTERM, work stops fetching, gives the sends waiting for the
budget back to the queue at once (no attempt), lets the sends in flight finish
for up to --shutdown-grace (cutting off the rest, whose jobs go back to the
queue and are retried with the same key), and exits 0. A second signal kills it.

An HTTP listener on --http-addr (loopback by default; empty disables it)
serves:
  /healthz   200 "ok" while the process runs
  /readyz    200 when the database answers, 503 and the reason otherwise
  /metrics   Prometheus metrics (sendonce_*, Go and process collectors)
  /riverui/  the River UI: jobs, queues, retries
  /outbox/   the outbox page: intents by state, sends per minute, the
             budget, failures by error, a filtered list, each intent with
             its payload, its place on the drain (or River job) and delivery events
Once working, work prints a line of its settings and, with the listener on,
the outbox page's URL (http://127.0.0.1:9464/outbox/ by default).
The River UI can cancel and retry jobs. When a UI token is given, it and
the outbox page need it, as "Authorization: Bearer TOKEN" or as the
password of HTTP basic authentication (any user name; a browser prompts for
it). The token comes from SENDONCE_UI_TOKEN or from the file named by
--ui-token-file (SENDONCE_UI_TOKEN_FILE), never from the command line:
flags show in ps, and --ui-token is refused. A token may be named,
NAME:SECRET, and several given comma-separated: the outbox page logs who
acted by the name. On an address that is not loopback, work refuses to
start without a token. Without one, on loopback, both answer only a request
whose Host is localhost, 127.x.x.x or [::1] (a page whose name was
re-pointed at 127.0.0.1, DNS rebinding, gets 403); the probes and /metrics
answer any Host.

The outbox page only reads unless --ui-actions is given; then it can retry
a failed intent (with the rules of "sendonce retry": one that could be
delivered twice only when forced) and cancel a pending one, each confirmed
first, and logged with the token's name.

--webhook-addr ADDR (off when empty) starts a listener of its own that takes
the API's signed delivery webhooks on POST /webhooks/openemail: each event is
verified with the secret from OPENEMAIL_WEBHOOK_SECRET (only from the
environment; several, comma-separated, while rotating), stored once, and
gives its intent a delivery status (delivered, delivery_delayed, bounced,
complained, failed, suppressed: see "sendonce show" and "list --delivery").
A refused delivery (bad or stale signature 401, bad body 400, over 1 MiB 413)
stores nothing. work refuses to start with --webhook-addr and no secret.

--unsubscribe-url URL (https://…, the public name of --webhook-addr's
listener) gives intents with a topic List-Unsubscribe and
List-Unsubscribe-Post headers (RFC 8058 one-click), signed with the secret
from SENDONCE_UNSUBSCRIBE_SECRET (only from the environment; the one before
it stays valid while in SENDONCE_UNSUBSCRIBE_SECRET_PREVIOUS), and serves
POST/GET /u/TOKEN on --webhook-addr. --unsubscribe-mailto ADDRESS adds a
mailto: form. Without --unsubscribe-url an intent with a topic is parked as
failed, never sent without the headers.

Tracing (OpenTelemetry) is off unless the standard environment asks for it:
OTEL_TRACES_EXPORTER=otlp|console (none: off), or an OTLP endpoint in
OTEL_EXPORTER_OTLP_ENDPOINT. Each send is a span under River's job span,
linked to the span that enqueued the intent; buffered spans are sent at exit.

--retain 30d deletes the settled intents (sent, failed, canceled, suppressed) settled more
than 30 days ago, every minute, one worker of the fleet at a time, keeping a
tombstone of each key for --retain-keys (default 1y) so that enqueueing it
again never sends twice (see "sendonce prune").

--poll-only never LISTENs (River and the sweeper poll): a send starts up to
--fetch-poll-interval after its commit instead of at once. Behind a
transaction-mode pooler such as PgBouncer, give --pooler transaction
(SENDONCE_POOLER), which implies --poll-only and runs every statement of
sendonce and River without prepared statements (pgx's exec mode).

Every flag can also be set by its environment variable (shown with the flag);
a flag given on the command line wins.`

const workExamples = `  OPENEMAIL_API_KEY=oe_live_… DATABASE_URL=postgres://app@db/app sendonce work
  sendonce work --concurrency 300 --fetch-cooldown 5ms --log-format json
  sendonce work --http-addr 0.0.0.0:9464 --ui-token-file /run/secrets/ui-token
  OPENEMAIL_BASE_URL=http://127.0.0.1:8025 OPENEMAIL_API_KEY=oe_test_x sendonce work   # against openemail-fake`

type workOptions struct {
	concurrency       int
	queue             string
	jobTimeout        time.Duration
	rescueAfter       time.Duration
	apiTimeout        time.Duration
	apiBaseURL        string
	maxRetries        int
	maxAttempts       int
	replayWindow      time.Duration
	maxSnoozes        int
	rateLimitWait     time.Duration
	maxPause          time.Duration
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	sweepInterval     time.Duration
	lease             time.Duration
	shutdownGrace     time.Duration
	httpAddr          string
	uiToken           string // from SENDONCE_UI_TOKEN or --ui-token-file (see resolveUIToken)
	uiTokenFile       string
	uiTokenInArgs     bool
	uiActions         bool
	apiRate           string
	rateLimits        []worker.RateLimit
	coalesce          int
	coalesceWait      time.Duration
	webhookAddr       string
	unsubscribeURL    string
	unsubscribeMailto string
	unsubscribe       *worker.Unsubscribe // from unsubscribeSigner
	partlySuppressed  string
	retain            retention
	retainKeys        retention
	pollOnly          bool
}

// workCommand declares `sendonce work`. Its cobra.Command literal is alike
// in shape to enqueue's on purpose: each command declares its own help and
// flags, and they share no logic.
//
// It is long because it is the command's flag list, each flag with its help
// and its environment variable, in the one place --help and docs/command.md's
// table are read from; splitting the list would only scatter it.
func (a *app) workCommand() *cobra.Command {
	o := &workOptions{}
	cmd := &cobra.Command{
		Use:     "work",
		Short:   "Run the worker: send every committed intent exactly once",
		Long:    workLong,
		Example: workExamples,
		Args:    noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			o.uiTokenInArgs = cmd.Flags().Changed("ui-token")
			if a.pooler == poolerTransaction {
				// LISTEN takes a session, which transaction pooling
				// does not give.
				if cmd.Flags().Changed("poll-only") && !o.pollOnly {
					return usagef("--pooler transaction needs --poll-only: LISTEN does not work through a transaction-mode pooler")
				}
				o.pollOnly = true
			}
			return a.work(cmd.Context(), o)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.concurrency, "concurrency", worker.DefaultConcurrency, "sends in flight at once in this process")
	f.StringVar(&o.queue, "queue", outbox.DefaultQueue, "River queue to work")
	f.DurationVar(&o.jobTimeout, "job-timeout", worker.DefaultJobTimeout, "bound on one attempt, the client's own retries included")
	f.DurationVar(&o.rescueAfter, "rescue-after", 0,
		"how long a job may stay running before it is taken for dead and run again (default job-timeout + 1m)")
	f.DurationVar(&o.apiTimeout, "api-timeout", client.DefaultTimeout, "bound on each HTTP attempt to the API (0: none)")
	f.StringVar(&o.apiBaseURL, "api-base-url", "", "OpenEmail API base URL (default "+client.DefaultBaseURL+")")
	f.IntVar(&o.maxRetries, "max-retries", client.DefaultMaxRetries, "extra HTTP attempts the client makes within one attempt")
	f.IntVar(&o.maxAttempts, "max-attempts", worker.DefaultMaxAttempts, "attempts before an intent is parked as failed (snoozes do not count)")
	f.DurationVar(&o.replayWindow, "replay-window", worker.DefaultReplayWindow,
		"from the first attempt, how long retries may go on (at most 24h, the API's idempotency window)")
	f.StringVar(&o.apiRate, "api-rate", "",
		"the API's rate limit for this key, shared by every worker: 10/s, 600/m, 36000/h, or several (10/s,500/m); empty: found from 429s")
	f.IntVar(&o.coalesce, "coalesce", 0,
		"send up to this many email intents in one batch request under a batch key of its own (2 to 100; 0: off)")
	f.DurationVar(&o.coalesceWait, "coalesce-wait", worker.DefaultCoalesceWait,
		"how long a partial batch waits to fill; no intent is held longer")
	f.IntVar(&o.maxSnoozes, "max-snoozes", worker.DefaultMaxSnoozes, "rate-limit snoozes before an intent is parked as failed")
	f.DurationVar(&o.rateLimitWait, "rate-limit-wait", worker.DefaultRateLimitWait, "longest an intent backs off on its own after 429s that are not a fleet signal (from 1s, doubling)")
	f.DurationVar(&o.maxPause, "max-pause", worker.DefaultMaxPause,
		"longest a 429's Retry-After pauses the fleet; past it the fleet probes with single requests, and no job waits longer for the budget")
	f.DurationVar(&o.fetchCooldown, "fetch-cooldown", worker.DefaultFetchCooldown, "least time between two fetches of jobs")
	f.DurationVar(&o.fetchPollInterval, "fetch-poll-interval", 0,
		"how often to look for jobs when no notification arrives (0: 10s with LISTEN, 1s polling)")
	f.DurationVar(&o.sweepInterval, "sweep-interval", worker.DefaultSweepInterval, "how often the drain looks for due intents it was not told of (retries come due, missed notifications), and the sweeps run")
	f.DurationVar(&o.lease, "lease", worker.DefaultLease,
		"this worker's liveness lease, renewed three times a lease: a worker that dies is found dead, and its sends replayed, just after it ends")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGINT/SIGTERM, how long sends in flight may take to finish")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:9464", "listen address for /healthz, /readyz, /metrics, /riverui and /outbox; empty disables")
	f.StringVar(&o.uiToken, "ui-token", "", "refused: flags show in ps; use "+envUIToken+" or --ui-token-file")
	_ = f.MarkHidden("ui-token")
	f.StringVar(&o.uiTokenFile, "ui-token-file", "",
		"file holding the token(s) the River UI and the outbox page require (required when --http-addr is not loopback): "+
			"SECRET or NAME:SECRET, several comma-separated; or the token itself in "+envUIToken+", never on the command line")
	f.BoolVar(&o.uiActions, "ui-actions", false, "let the outbox page (/outbox/) retry and cancel intents; without it the page only reads")
	f.StringVar(&o.partlySuppressed, "partly-suppressed", string(worker.PartlySuppressedSend),
		"an intent with some recipients on the suppression list: send (to the others) or park (as suppressed)")
	f.StringVar(&o.webhookAddr, "webhook-addr", "",
		"listen address for the API's delivery webhooks (POST "+webhookPath+"; secret from "+envWebhookSecret+"); empty disables")
	f.StringVar(&o.unsubscribeURL, "unsubscribe-url", "",
		"public https base URL of --webhook-addr's listener for one-click unsubscribe links (URL/u/TOKEN; secret from "+envUnsubscribeSecret+"); empty: intents with a topic are parked")
	f.StringVar(&o.unsubscribeMailto, "unsubscribe-mailto", "", "an address to add as a mailto: form of List-Unsubscribe (sendonce does not read it)")
	o.retainKeys = retention(worker.DefaultRetainKeys)
	f.Var(&o.retain, "retain", "delete settled intents settled longer ago than this, e.g. 30d (see sendonce prune); 0: keep for ever")
	f.Var(&o.retainKeys, "retain-keys", "with --retain, keep pruned intents' key tombstones this long (0: for ever)")
	f.BoolVar(&o.pollOnly, "poll-only", false,
		"poll instead of LISTEN/NOTIFY (implied by --pooler transaction); sends start up to --fetch-poll-interval later")
	for flag, env := range map[string]string{
		"retain":              "SENDONCE_RETAIN",
		"retain-keys":         "SENDONCE_RETAIN_KEYS",
		"poll-only":           "SENDONCE_POLL_ONLY",
		"concurrency":         "SENDONCE_CONCURRENCY",
		"queue":               "SENDONCE_QUEUE",
		"job-timeout":         "SENDONCE_JOB_TIMEOUT",
		"rescue-after":        "SENDONCE_RESCUE_AFTER",
		"api-timeout":         "SENDONCE_API_TIMEOUT",
		"api-base-url":        client.EnvBaseURL,
		"max-retries":         "SENDONCE_MAX_RETRIES",
		"max-attempts":        "SENDONCE_MAX_ATTEMPTS",
		"replay-window":       "SENDONCE_REPLAY_WINDOW",
		"max-snoozes":         "SENDONCE_MAX_SNOOZES",
		"api-rate":            "SENDONCE_API_RATE",
		"coalesce":            "SENDONCE_COALESCE",
		"coalesce-wait":       "SENDONCE_COALESCE_WAIT",
		"rate-limit-wait":     "SENDONCE_RATE_LIMIT_WAIT",
		"max-pause":           "SENDONCE_MAX_PAUSE",
		"fetch-cooldown":      "SENDONCE_FETCH_COOLDOWN",
		"fetch-poll-interval": "SENDONCE_FETCH_POLL_INTERVAL",
		"sweep-interval":      "SENDONCE_SWEEP_INTERVAL",
		"lease":               "SENDONCE_LEASE",
		"shutdown-grace":      "SENDONCE_SHUTDOWN_GRACE",
		"http-addr":           "SENDONCE_HTTP_ADDR",
		"ui-token":            envUIToken,
		"ui-token-file":       envUITokenFile,
		"ui-actions":          "SENDONCE_UI_ACTIONS",
		"webhook-addr":        "SENDONCE_WEBHOOK_ADDR",
		"partly-suppressed":   "SENDONCE_PARTLY_SUPPRESSED",
		"unsubscribe-url":     "SENDONCE_UNSUBSCRIBE_URL",
		"unsubscribe-mailto":  "SENDONCE_UNSUBSCRIBE_MAILTO",
	} {
		bindEnv(f, flag, env)
	}
	return cmd
}

// check refuses option values that cannot work, before anything starts.
func (o *workOptions) check() error {
	if err := o.resolveUIToken(); err != nil {
		return err
	}
	if o.apiRate != "" {
		limits, err := worker.ParseRateLimits(o.apiRate)
		if err != nil {
			return usagef("--api-rate: %v", err)
		}
		o.rateLimits = limits
	}
	switch {
	case o.concurrency < 1:
		return usagef("--concurrency %d: want 1 or more", o.concurrency)
	case o.queue == "":
		return usagef("--queue must not be empty")
	case o.jobTimeout <= 0:
		return usagef("--job-timeout %s: want a positive duration", o.jobTimeout)
	case o.rescueAfter < 0 || (o.rescueAfter > 0 && o.rescueAfter <= o.jobTimeout):
		return usagef("--rescue-after %s must exceed --job-timeout %s", o.rescueAfter, o.jobTimeout)
	case o.apiTimeout < 0:
		return usagef("--api-timeout %s: want 0 or more", o.apiTimeout)
	case o.maxRetries < 0:
		return usagef("--max-retries %d: want 0 or more", o.maxRetries)
	case o.maxAttempts < 1 || o.maxAttempts > worker.MaxAttempts:
		return usagef("--max-attempts %d: want 1 to %d (below the River job's own limit)", o.maxAttempts, worker.MaxAttempts)
	case o.replayWindow <= 0 || o.replayWindow > outbox.MaxReplayWindow:
		return usagef("--replay-window %s: want a positive duration of at most %s, the time the API keeps an idempotency key",
			o.replayWindow, outbox.MaxReplayWindow)
	case o.coalesce < 0 || o.coalesce > worker.MaxCoalesce:
		return usagef("--coalesce %d: want 0 (off) to %d, the API's batch limit", o.coalesce, worker.MaxCoalesce)
	case o.partlySuppressed != string(worker.PartlySuppressedSend) && o.partlySuppressed != string(worker.PartlySuppressedPark):
		return usagef("--partly-suppressed %q: want send or park", o.partlySuppressed)
	case o.coalesceWait <= 0:
		return usagef("--coalesce-wait %s: want a positive duration", o.coalesceWait)
	case o.maxSnoozes < 1:
		return usagef("--max-snoozes %d: want 1 or more", o.maxSnoozes)
	case o.rateLimitWait <= 0:
		return usagef("--rate-limit-wait %s: want a positive duration", o.rateLimitWait)
	case o.maxPause <= 0:
		return usagef("--max-pause %s: want a positive duration", o.maxPause)
	case o.fetchCooldown <= 0:
		return usagef("--fetch-cooldown %s: want a positive duration", o.fetchCooldown)
	case o.fetchPollInterval != 0 && o.fetchPollInterval < o.fetchCooldown:
		return usagef("--fetch-poll-interval %s must be at least --fetch-cooldown %s", o.fetchPollInterval, o.fetchCooldown)
	case o.sweepInterval <= 0:
		return usagef("--sweep-interval %s: want a positive duration", o.sweepInterval)
	case o.lease < 500*time.Millisecond:
		return usagef("--lease %s: want 500ms or more", o.lease)
	case o.shutdownGrace < 0:
		return usagef("--shutdown-grace %s: want 0 or more", o.shutdownGrace)
	case o.httpAddr != "" && !httpserver.IsLoopback(o.httpAddr) && o.uiToken == "":
		return usagef("--http-addr %s is not loopback: give a UI token (%s, or --ui-token-file) so the River UI and the outbox page are not open to the network",
			o.httpAddr, envUIToken)
	}
	return nil
}

// retainKeys is --retain-keys as worker.Config.RetainKeys: 0 is for ever.
func retainKeys(r retention) time.Duration {
	if r == 0 {
		return worker.KeepKeysForever
	}
	return time.Duration(r)
}

// poolSize is the connections the worker needs for a concurrency: sends
// hold one only to claim and record an intent, and River needs a few of its
// own (fetching, notifications, leadership, completion, maintenance, the
// sweeper's listener).
func poolSize(concurrency int) int { return concurrency/4 + 10 }

// work runs the worker until ctx ends (a signal), then shuts it down. Each
// step is a function of its own below, in the order they run.
func (a *app) work(ctx context.Context, o *workOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	log := a.logger
	m := metrics.New()
	secrets, signer, err := a.listenerSecrets(o)
	if err != nil {
		return err
	}
	c, err := a.apiClient(o, m)
	if err != nil {
		return err
	}

	pool, err := a.connectMigrated(ctx, poolSize(o.concurrency))
	if err != nil {
		return err
	}
	defer pool.Close()
	ob, err := outbox.New(pool, &outbox.Config{Queue: o.queue})
	if err != nil {
		return err
	}
	m.WatchOutbox(ob, 5*time.Second, log)
	m.WatchBudget(pool, 5*time.Second, log)
	m.WatchRuns(ob, 5*time.Second, log)
	m.WatchTenants(pool, 5*time.Second, log)

	flush, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	defer flush()

	w, err := worker.New(pool, o.workerConfig(c, m, log))
	if err != nil {
		return err
	}

	// The worker and the UI live until the shutdown below, not until the
	// signal: cancelling River's context would cut off the sends in flight.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()

	ops, opsSrv, err := a.serveOps(runCtx, o, w, ob, pool, m)
	if err != nil {
		return err
	}
	hookSrv, err := serveWebhooks(o, pool, secrets, ob, signer, m, log)
	if err != nil {
		opsSrv.close()
		return err
	}
	if err := w.Start(runCtx); err != nil {
		opsSrv.close()
		hookSrv.close()
		return err
	}
	started := o.startupLine(c, opsSrv.where(), hookSrv.where(), a.pooler) + "\n"
	if opsSrv != nil {
		started += "sendonce work: the outbox page: " + outboxPageURL(opsSrv.addr) + "\n"
	}
	fmt.Fprint(a.stdout, started) // one write: a reader of the first line finds the second

	var srvErr error
	select {
	case <-ctx.Done():
	case srvErr = <-opsSrv.doneC():
		// The listener died under us: stop as for a signal, then fail.
		log.Error("http listener failed; shutting down", "error", srvErr)
	case srvErr = <-hookSrv.doneC():
		log.Error("webhook listener failed; shutting down", "error", srvErr)
	}
	if err := a.shutdown(ctx, o, w, ops, opsSrv, hookSrv); err != nil {
		return err
	}
	if srvErr != nil {
		return fmt.Errorf("http listener: %w", srvErr)
	}
	return nil
}

// listenerSecrets are what the public listener verifies and signs with: the
// webhook signing secrets (needed with --webhook-addr) and the unsubscribe
// links' signer (nil without --unsubscribe-url).
func (a *app) listenerSecrets(o *workOptions) ([]string, *unsub.Signer, error) {
	var secrets []string
	if o.webhookAddr != "" {
		secrets = webhookSecrets(a.getenv(envWebhookSecret))
		if len(secrets) == 0 {
			return nil, nil, usagef("--webhook-addr %s needs the signing secret in %s (comma-separated to rotate)", o.webhookAddr, envWebhookSecret)
		}
	}
	signer, err := a.unsubscribeSigner(o)
	if err != nil {
		return nil, nil, err
	}
	return secrets, signer, nil
}

// apiTransport is http.DefaultTransport keeping an idle connection for
// each of concurrency sends in flight. Both limits must be raised: the
// default transport's MaxIdleConns of 100 (idle connections to all hosts)
// closed what MaxIdleConnsPerHost let it keep, and a worker of concurrency
// 500 dialled (and against the real API, shook hands over TLS) again for
// 400 of every 500 sends.
func apiTransport(concurrency int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(concurrency, 2)
	t.MaxIdleConns = max(concurrency, t.MaxIdleConns)
	return t
}

// apiClient is the API client: the key from the environment only, every
// HTTP attempt counted, and enough idle connections kept for every send in
// flight.
func (a *app) apiClient(o *workOptions, m *metrics.Metrics) (*client.Client, error) {
	key := a.getenv(client.EnvAPIKey)
	if key == "" {
		return nil, fmt.Errorf("%s is not set: work needs an OpenEmail API key (oe_live_… or oe_test_…) in the environment", client.EnvAPIKey)
	}
	transport := apiTransport(o.concurrency)
	opts := []client.Option{
		client.WithAPIKey(key),
		client.WithTimeout(o.apiTimeout),
		client.WithMaxRetries(o.maxRetries),
		client.WithHTTPClient(&http.Client{Transport: m.InstrumentTransport(transport)}),
		client.WithLogger(a.logger),
	}
	if o.apiBaseURL != "" {
		opts = append(opts, client.WithBaseURL(o.apiBaseURL))
	}
	c, err := client.New(opts...)
	switch {
	case errors.Is(err, client.ErrInvalidAPIKey):
		return nil, fmt.Errorf("%s is not a valid OpenEmail API key: want one starting oe_live_ or oe_test_", client.EnvAPIKey)
	case err != nil:
		return nil, err
	}
	// A plain-http base URL off this machine is refused by worker.New,
	// for the command and the library alike.
	return c, nil
}

// startTracing turns tracing on when the OTEL_* environment asks for it;
// the function it returns flushes the spans at exit, after the last send.
func startTracing(ctx context.Context, log *slog.Logger) (flush func(), err error) {
	tr, err := tracing.Setup(ctx, "sendonce")
	if err != nil || tr == nil {
		return func() {}, err
	}
	log.Info("tracing on", "exporter", tr.Exporter)
	return func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(flushCtx); err != nil {
			log.Warn("spans not all sent at exit", "error", err)
		}
	}, nil
}

// workerConfig is the options as the worker's Config.
func (o *workOptions) workerConfig(c *client.Client, m *metrics.Metrics, log *slog.Logger) *worker.Config {
	return &worker.Config{
		Client:            c,
		Queue:             o.queue,
		Concurrency:       o.concurrency,
		JobTimeout:        o.jobTimeout,
		RescueAfter:       o.rescueAfter,
		FetchCooldown:     o.fetchCooldown,
		FetchPollInterval: o.fetchPollInterval,
		SweepInterval:     o.sweepInterval,
		Lease:             o.lease,
		RateLimits:        o.rateLimits,
		Coalesce:          o.coalesce,
		CoalesceWait:      o.coalesceWait,
		Retain:            time.Duration(o.retain),
		RetainKeys:        retainKeys(o.retainKeys),
		PollOnly:          o.pollOnly,
		Send: worker.SendConfig{
			ReplayWindow:  o.replayWindow,
			MaxAttempts:   o.maxAttempts,
			MaxSnoozes:    o.maxSnoozes,
			RateLimitWait: o.rateLimitWait,
			MaxPause:      o.maxPause,
			Observer:      m,

			PartlySuppressed: worker.PartlySuppressed(o.partlySuppressed),
			Unsubscribe:      o.unsubscribe,
		},
		Logger: log,
	}
}

// listener is an HTTP server run beside the worker; nil when it is off.
type listener struct {
	srv  *http.Server
	done chan error
	addr string
}

// serve starts serving h on ln.
func serve(ln net.Listener, srv *http.Server) *listener {
	l := &listener{srv: srv, done: make(chan error, 1), addr: "http://" + ln.Addr().String()}
	go func() { l.done <- srv.Serve(ln) }()
	return l
}

// close closes the server at once (a start that failed).
func (l *listener) close() {
	if l != nil {
		_ = l.srv.Close()
	}
}

// shutdown lets the server's requests finish, within ctx.
func (l *listener) shutdown(ctx context.Context) {
	if l != nil {
		_ = l.srv.Shutdown(ctx)
	}
}

// doneC is the channel that says the server stopped; nil (never ready)
// when it is off.
func (l *listener) doneC() <-chan error {
	if l == nil {
		return nil
	}
	return l.done
}

// where is the address for the startup line: "off" when the server is off.
func (l *listener) where() string {
	if l == nil {
		return "off"
	}
	return l.addr
}

// serveOps serves health, metrics, the River UI and the outbox page on
// --http-addr (nil, nil when it is empty).
func (a *app) serveOps(ctx context.Context, o *workOptions, w *worker.Worker, ob *outbox.Outbox, pool *pgxpool.Pool, m *metrics.Metrics) (*httpserver.Handler, *listener, error) {
	if o.httpAddr == "" {
		return nil, nil, nil
	}
	log := a.logger
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(w.RiverClient(), nil),
		Prefix:    httpserver.UIPrefix,
		Logger:    log,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("river ui: %w", err)
	}
	if err := ui.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("river ui: %w", err)
	}
	page, err := outboxui.New(pool, ob, outboxui.Options{
		Actions:      o.uiActions,
		ReplayWindow: o.replayWindow,
		RiverUI:      httpserver.UIPrefix,
		Logger:       log,
		WebhookAddr:  o.webhookAddr,
		MaxAttempts:  o.maxAttempts,
	})
	if err != nil {
		return nil, nil, err
	}
	ops := httpserver.New(httpserver.Options{
		Ready:    func(ctx context.Context) error { return ready(ctx, pool, a.databaseURL) },
		Metrics:  m.Handler(),
		RiverUI:  ui,
		OutboxUI: page,
		UIToken:  o.uiToken,
	})
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot listen on --http-addr: %w", err)
	}
	return ops, serve(ln, &http.Server{Handler: ops, ReadHeaderTimeout: 10 * time.Second}), nil
}

// serveWebhooks serves the API's delivery webhooks on --webhook-addr (nil
// when it is empty).
func serveWebhooks(o *workOptions, pool *pgxpool.Pool, secrets []string, ob *outbox.Outbox, signer *unsub.Signer,
	m *metrics.Metrics, log *slog.Logger) (*listener, error) {
	if o.webhookAddr == "" {
		return nil, nil
	}
	h, err := webhook.New(pool, secrets, log)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(webhookPath, h)
	if signer != nil {
		// The one-click unsubscribe endpoint, with the webhook receiver's
		// limits: 1 MiB of body, the server's timeouts below.
		mux.Handle(unsubscribe.Pattern, unsubscribe.New(ob, signer, log, m.Unsubscribed))
	}
	ln, err := net.Listen("tcp", o.webhookAddr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on --webhook-addr: %w", err)
	}
	return serve(ln, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}), nil
}

// outboxPageURL is the outbox page's URL on the listener at addr
// ("http://host:port"), for a browser on this machine: a listener on every
// address (0.0.0.0, [::]) is reached as localhost.
func outboxPageURL(addr string) string {
	hostPort := strings.TrimPrefix(addr, "http://")
	if host, port, err := net.SplitHostPort(hostPort); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			hostPort = net.JoinHostPort("localhost", port)
		}
	}
	return "http://" + hostPort + outboxui.Prefix + "/"
}

// startupLine is the line work prints once it is working.
func (o *workOptions) startupLine(c *client.Client, addr, hookAddr string, pooler poolerMode) string {
	rate := o.apiRate
	if rate == "" {
		rate = "from-429s"
	}
	coalesce := "off"
	if o.coalesce >= 2 {
		coalesce = fmt.Sprintf("%d/%s", o.coalesce, o.coalesceWait)
	}
	retain := "off"
	if o.retain > 0 {
		retain = o.retain.String() + "/keys:" + o.retainKeys.String()
		if o.retainKeys == 0 {
			retain = o.retain.String() + "/keys:forever"
		}
	}
	return fmt.Sprintf("sendonce work: queue=%s concurrency=%d http=%s api=%s api-rate=%s coalesce=%s webhooks=%s retain=%s poll-only=%t pooler=%s",
		o.queue, o.concurrency, addr, apiHost(c.BaseURL()), rate, coalesce, hookAddr, retain, o.pollOnly, pooler)
}

// shutdown stops the worker within --shutdown-grace (the sends still in
// flight then are cancelled and go back to the queue), then the listeners.
func (a *app) shutdown(ctx context.Context, o *workOptions, w *worker.Worker, ops *httpserver.Handler, listeners ...*listener) error {
	log := a.logger
	log.Info("shutting down: no new sends; waiting for the sends in flight", "grace", o.shutdownGrace.String())
	if ops != nil {
		ops.SetDraining()
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownGrace)
	defer cancel()
	stopErr := w.Stop(stopCtx)
	if stopCtx.Err() != nil {
		log.Warn("shutdown grace ran out: sends still in flight were cancelled and go back to the queue")
	}
	httpCtx, cancelHTTP := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelHTTP()
	for _, l := range listeners {
		l.shutdown(httpCtx)
	}
	if stopErr != nil {
		return fmt.Errorf("stop: %w", stopErr)
	}
	log.Info("stopped")
	return nil
}

// ready reports whether the database answers.
func ready(ctx context.Context, pool *pgxpool.Pool, dsn string) error {
	if err := pool.Ping(ctx); err != nil {
		return errors.New("database unreachable: " + errorLine(err, dsnSecrets(dsn)...))
	}
	return nil
}

// unsubscribeSigner is the signer of the unsubscribe tokens (nil without
// --unsubscribe-url). Its errors name the variables, never a value.
func (a *app) unsubscribeSigner(o *workOptions) (*unsub.Signer, error) {
	if o.unsubscribeURL == "" {
		return nil, nil
	}
	secret := a.getenv(envUnsubscribeSecret)
	if secret == "" {
		return nil, usagef("--unsubscribe-url needs the signing secret in %s", envUnsubscribeSecret)
	}
	if o.webhookAddr == "" {
		return nil, usagef("--unsubscribe-url needs --webhook-addr, the public listener that serves %s", unsubscribe.Pattern)
	}
	s, err := unsub.New(o.unsubscribeURL, o.unsubscribeMailto, secret, webhookSecrets(a.getenv(envUnsubscribePrevious))...)
	if err != nil {
		return nil, usagef("%v (secret from %s, previous from %s)", err, envUnsubscribeSecret, envUnsubscribePrevious)
	}
	o.unsubscribe = &worker.Unsubscribe{URL: o.unsubscribeURL, Mailto: o.unsubscribeMailto, Secret: secret}
	return s, nil
}

// webhookSecrets splits the secret variable at commas, dropping blanks.
func webhookSecrets(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// apiHost is the host of the API's base URL, for the startup line.
func apiHost(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}
