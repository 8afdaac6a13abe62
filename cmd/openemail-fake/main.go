// Command openemail-fake serves the fake OpenEmail API (package fakeapi) as a
// process, for docker-compose, the demo and integration tests that drive a
// fake in another process. Run it with --help for every knob.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/fakeapi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1 // the settings were good but serving failed (the address is taken, …)
	exitUsage   = 2 // a flag, an argument or an environment variable was wrong; nothing was started
)

// runtimeError marks a failure after the settings were accepted; every
// other error (cobra's own, a bad flag value, a bad environment variable) is
// a usage error.
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// execute runs the command with args and returns its exit status. A bad
// setting is reported on stderr as one line, "Error: …", and exits 2.
func execute(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd, _ := newCommand(getenv, stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var re runtimeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &re):
		return exitRuntime
	default:
		return exitUsage
	}
}

const longHelp = `openemail-fake serves a fake of the OpenEmail HTTP API: the stand-in for the
real API in tests, the demo and docker-compose. Sends are idempotent as the API
makes them (Idempotency-Key claimed before delivery; a repeat replays with
"replayed": true; another body under the key is 422 idempotency_key_reuse), and
every message actually delivered is written to a ledger tests can read.

It prints "openemail-fake listening on URL (seed N)" on stdout once it accepts
requests, logs one line per request on stderr (API keys only as their
oe_test_/oe_live_ prefix), and shuts down gracefully on SIGINT or SIGTERM.

Every flag can also be set by its environment variable (shown with the flag);
a flag given on the command line wins.

API (base URL as printed, no /v1; Authorization: Bearer oe_test_… or oe_live_…):
  POST /emails, POST /emails/batch, POST /templates/{id}/send, POST /broadcasts
  GET /emails, GET /emails/{id}, PATCH /emails/{id}, POST /emails/{id}/cancel
  GET /broadcasts, GET /broadcasts/{id}, POST /broadcasts/{id}/cancel

Control endpoints (no key needed):
  GET  /_fake/deliveries[?to=addr]  the delivery ledger
  GET  /_fake/requests              every API request: time, method, path, key,
                                    status, fault fired, Retry-After sent
  GET  /_fake/webhooks              every webhook attempt: event, delivery id, type,
                                    email, copy, attempt, status answered, fault fired
  GET  /_fake/faults                the fault rules and seed
  POST /_fake/faults                replace them: {"faults":["rule",…],"seed":n}
  POST /_fake/reset                 forget everything, restore the startup rules
  GET  /_fake/health                {"ok":true}

Fault rules (--fault, OPENEMAIL_FAKE_FAULTS, POST /_fake/faults, or per request
in an X-Fake-Fault header):

  kind[=value][:option=value]...     (';' works as the separator too)

  kinds:
    error_before[=STATUS]   answer STATUS (default 503) before handling; nothing stored or sent
    rate_limit              answer 429 with no Retry-After
    retry_after=VALUE       answer 429 (or status=S) with Retry-After: VALUE before handling;
                            VALUE: seconds as written (2, 1.5, 120) or an HTTP-date:
                            date, date+5s, date-5s
    latency=DURATION        sleep before handling (ends early if the client gives up)
    error_after[=STATUS]    deliver and store, then answer STATUS (default 503)
    drop_after              deliver and store, then close the connection with no answer
    latency_after=DURATION  deliver and store, then sleep before answering
    reject[=CODE]           while handling a send, refuse each email it matches with CODE
                            (default recipient_rejected): a batch answers 200 with that email
                            as {"status":"failed","error":{…}} in its place and sends the
                            others; a single send answers 422 and stores nothing
  webhook kinds (act on the events of each email delivered; need --webhook-url):
    bounce                  the email's event is email.bounced instead of email.delivered
    complain                the email's event is email.complained
    delay_then_bounce       two events: email.delivery_delayed, then email.bounced
    webhook_duplicate       the event is POSTed twice: same event id, same X-OpenEmail-Delivery
    webhook_out_of_order[=N]  the event is held until N (default 1) later events went (at most 2s)
    webhook_delay=DURATION  the event is held for DURATION; later events go meanwhile
    webhook_bad_signature   the event is signed with a wrong secret
    webhook_stale           the event is signed with t 301 s in the past (outside the 300 s tolerance)
  options:
    to=TEXT     some recipient (to/cc/bcc, any email of a batch) contains TEXT;
                for reject and the webhook kinds, a recipient of the email itself
    key=TEXT    the Idempotency-Key contains TEXT (colons in TEXT are fine)
    path=GLOB   the request path matches: /emails, /emails/*, /templates/*/send
    method=M    the request method is M (path= and method= not for the webhook kinds)
    times=N     fire at most N times per Idempotency-Key (unkeyed requests share a count);
                reject counts each refused email
    p=P         fire with probability P (seeded by --seed, so runs repeat)
    status=S    the status of error_before, error_after or retry_after

  Several rules: repeat --fault, or separate them with commas.

Rate limit (--rate, OPENEMAIL_FAKE_RATE; default none):

  COUNT/UNIT with UNIT s, m or h: 10/s, 600/m, 36000/h; several comma-separated
  (10/s,500/m), all of which must hold. Each is a token bucket per API key that
  holds one second's worth of its rate, at least 1: 10/s and 600/m admit a
  burst of 10, then one request every 100 ms; 5/m one, then one every 12 s.
  Every authenticated API request spends a token, whatever it asks for; the
  /_fake/ endpoints and requests without a valid key do not. A request over a
  limit is answered 429 rate_limit_error (code rate_limited) and not processed:
  no Idempotency-Key is claimed, nothing is sent, no fault fires. Like the API,
  the 429 carries no Retry-After, unless asked:
    --rate-retry-after  Retry-After: whole seconds until the key's next token
    --rate-headers      RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset on
                        every API answer (the IETF draft fields), with
                        RateLimit-Policy: CAPACITY;w=SECONDS per limit
  /_fake/requests marks such a 429 "rateLimited": true and counts them.

  --quota COUNT/d (or COUNT/mo) counts each key's requests per calendar day
  (month) in UTC, what the rate limit passed. Past it: 429 rate_limit_error,
  code daily_quota_exceeded (monthly_quota_exceeded), a message naming the
  quota and its reset, and Retry-After: seconds until midnight UTC.

Webhooks (--webhook-url, --webhook-secret; default off):

  For every email delivered (each email of a batch, a scheduled one when it
  falls due; not broadcasts) the fake POSTs one event to the URL, from one
  sender in order and asynchronously, retrying a non-2xx answer or a network
  error 3 times (after 50ms, 100ms, 200ms):
    {"id":"evt_…","type":"email.delivered","createdAt":"2030-01-02T15:04:05.000Z",
     "data":{"emailId":"em_…","to":["…"]}}
  with Content-Type: application/json, X-OpenEmail-Event: <type>,
  X-OpenEmail-Delivery: whd_… (the same on every retry and duplicate) and
  X-OpenEmail-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>"
  keyed by the secret>. The secret is never printed or logged.

Exit status: 0 after a graceful shutdown, 1 when serving failed (say, the
address is taken), 2 for a bad flag or environment variable (one line on
stderr, nothing started).`

const examples = `  openemail-fake
  openemail-fake --addr 0.0.0.0:8025 --seed 42 --log-format json
  openemail-fake --fault 'drop_after:p=0.2' --fault 'error_before=503:times=2:to=flaky@'
  openemail-fake --fault 'retry_after=120:status=503:path=/emails/batch' --latency 50ms
  openemail-fake --fault 'reject=suppressed:to=bounced@'
  OPENEMAIL_FAKE_FAULTS='latency_after=30s:key=invoice:,rate_limit:p=0.05' openemail-fake
  openemail-fake --rate 10/s,500/m --rate-headers
  OPENEMAIL_WEBHOOK_SECRET=… openemail-fake --webhook-url http://127.0.0.1:8080/webhooks/openemail \
    --fault 'bounce:to=bounced@' --fault 'webhook_duplicate:p=0.1'
  curl -H 'X-Fake-Fault: error_before=503;times=2' -H 'Idempotency-Key: k1' …   # per request`

// newCommand builds the command; getenv, stdout and stderr are injected so
// tests can run it in-process. Its cobra.Command is alike in shape to
// sendonce's commands on purpose: the fake is a program of its own and
// shares no code with sendonce, only the contract.
func newCommand(getenv func(string) string, stdout, stderr io.Writer) (*cobra.Command, *options) {
	o := &options{}
	cmd := &cobra.Command{
		Use:          "openemail-fake",
		Short:        "Serve a fake OpenEmail API with an idempotency ledger and fault injection",
		Long:         longHelp,
		Example:      examples,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range secretFlags {
				if cmd.Flags().Changed(name) {
					o.secretsInArgs = append(o.secretsInArgs, name)
				}
			}
			return applyEnv(cmd, getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	o.register(cmd.Flags())
	return cmd, o
}

// run serves until ctx ends, then shuts down gracefully.
func (o *options) run(ctx context.Context, stdout, stderr io.Writer) error {
	logger, err := o.newLogger(stderr)
	if err != nil {
		return err
	}
	for _, name := range o.secretsInArgs {
		logger.Warn("a secret on the command line is shown to every user of this machine by ps: set its environment variable instead",
			"flag", "--"+name, "env", envNames[name])
	}
	cfg, err := o.config(logger)
	if err != nil {
		return err
	}
	srv := fakeapi.New(cfg)
	url, err := srv.Start(o.addr)
	if err != nil {
		srv.Close()
		return runtimeError{err}
	}
	fmt.Fprintf(stdout, "openemail-fake listening on %s (seed %d)\n", url, srv.Seed())

	<-ctx.Done()
	logger.Info("shutting down", "timeout", o.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return runtimeError{err}
		}
		logger.Warn("requests still in flight were cut off", "timeout", o.shutdownTimeout.String())
	}
	return nil
}
