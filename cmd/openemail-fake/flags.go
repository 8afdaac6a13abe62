package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sendonce/sendonce/fakeapi"
)

// options are the command's knobs, each a flag with an environment variable.
type options struct {
	addr            string
	keyWindow       time.Duration
	seed            int64
	faults          []string
	latency         time.Duration
	maxBody         byteSize
	apiKeys         []string
	rate            rateValue
	quota           quotaValue
	rateRetryAfter  bool
	rateHeaders     bool
	webhookURL      string
	webhookSecret   string
	logFormat       string
	logLevel        string
	schedulerTick   time.Duration
	shutdownTimeout time.Duration

	// secretsInArgs are the secret flags given on the command line, which
	// run warns about (see secretFlags).
	secretsInArgs []string
}

// secretFlags hold secrets. They stay flags, as docs/webhooks.md and the tests
// use them, but a command line is in every local user's ps for as long as
// the fake runs, so giving one there is warned about at start.
var secretFlags = []string{"webhook-secret", "api-key"}

// envPrefix starts every environment variable the command reads.
const envPrefix = "OPENEMAIL_FAKE_"

// envNames maps each flag to its environment variable. A flag given on the
// command line wins over its variable.
var envNames = map[string]string{
	"addr":             envPrefix + "ADDR",
	"key-window":       envPrefix + "KEY_WINDOW",
	"seed":             envPrefix + "SEED",
	"fault":            envPrefix + "FAULTS",
	"latency":          envPrefix + "LATENCY",
	"max-body":         envPrefix + "MAX_BODY",
	"api-key":          envPrefix + "API_KEYS",
	"rate":             envPrefix + "RATE",
	"rate-retry-after": envPrefix + "RATE_RETRY_AFTER",
	"rate-headers":     envPrefix + "RATE_HEADERS",
	"quota":            envPrefix + "QUOTA",
	"webhook-url":      envPrefix + "WEBHOOK_URL",
	// The secret's variable is the one the receiving side reads too, so one
	// setting in docker-compose serves both.
	"webhook-secret":   "OPENEMAIL_WEBHOOK_SECRET",
	"log-format":       envPrefix + "LOG_FORMAT",
	"log-level":        envPrefix + "LOG_LEVEL",
	"scheduler-tick":   envPrefix + "SCHEDULER_TICK",
	"shutdown-timeout": envPrefix + "SHUTDOWN_TIMEOUT",
}

func (o *options) register(fs *pflag.FlagSet) {
	o.maxBody = fakeapi.DefaultMaxBodyBytes
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8025",
		"address to listen on; use 0.0.0.0:8025 in a container")
	fs.DurationVar(&o.keyWindow, "key-window", fakeapi.DefaultKeyWindow,
		"how long an Idempotency-Key is remembered; after it the same key sends again")
	fs.Int64Var(&o.seed, "seed", 0,
		"seed for probabilistic faults (p=…); 0 picks one and prints it, pass it back to repeat a run")
	fs.StringArrayVar(&o.faults, "fault", nil,
		"fault rule (repeatable; several rules may also be comma-separated); syntax below")
	fs.DurationVar(&o.latency, "latency", 0,
		"delay before handling every API request (shorthand for --fault latency=DURATION)")
	fs.Var(&o.maxBody, "max-body",
		"largest request body accepted, larger is 413 (bytes, or with KiB/MiB/GiB)")
	fs.StringArrayVar(&o.apiKeys, "api-key", nil,
		"accept only this API key (repeatable or comma-separated); default: any oe_test_…/oe_live_… key. "+
			"Prefer the environment variable: flags show in ps")
	fs.Var(&o.rate, "rate",
		"limit each API key to COUNT/UNIT requests (UNIT s, m or h), e.g. 10/s or 10/s,500/m "+
			"(repeatable; all limits must hold); over it is 429 rate_limit_error; default: no limit")
	fs.BoolVar(&o.rateRetryAfter, "rate-retry-after", false,
		"with --rate: a 429 of the limiter carries Retry-After (seconds until the next token); "+
			"the API sends none, so neither does the fake by default")
	fs.BoolVar(&o.rateHeaders, "rate-headers", false,
		"with --rate: every API answer carries RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset and RateLimit-Policy")
	fs.Var(&o.quota, "quota",
		"count each API key's requests per calendar day or month in UTC, COUNT/d or COUNT/mo (e.g. 500/d); past it is "+
			"429 daily_quota_exceeded with Retry-After until midnight UTC; default: no quota")
	fs.StringVar(&o.webhookURL, "webhook-url", "",
		"POST a signed webhook event (email.delivered, or as the event rules say) to this URL for every email delivered; "+
			"needs --webhook-secret")
	fs.StringVar(&o.webhookSecret, "webhook-secret", "",
		"secret the webhook events are signed with (HMAC-SHA256, X-OpenEmail-Signature); never printed or logged. "+
			"Prefer the environment variable: flags show in ps")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error (info logs one line per request)")
	fs.DurationVar(&o.schedulerTick, "scheduler-tick", fakeapi.DefaultSchedulerInterval,
		"how often scheduled sends that fell due are delivered when nobody reads")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 5*time.Second,
		"on SIGINT/SIGTERM, how long to let requests in flight finish before cutting them off")
	fs.VisitAll(func(f *pflag.Flag) {
		if env, ok := envNames[f.Name]; ok {
			f.Usage += " (env " + env + ")"
		}
	})
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set and not empty.
func applyEnv(cmd *cobra.Command, getenv func(string) string) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env, ok := envNames[f.Name]
		if !ok || f.Changed || err != nil {
			return
		}
		if v := getenv(env); v != "" {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v", env, v, e)
			}
		}
	})
	return err
}

// config turns the options into a fakeapi.Config.
func (o *options) config(logger *slog.Logger) (fakeapi.Config, error) {
	cfg := fakeapi.Config{
		KeyWindow:         o.keyWindow,
		MaxBodyBytes:      int64(o.maxBody),
		Seed:              o.seed,
		SchedulerInterval: o.schedulerTick,
		Logger:            logger,
		Rate:              o.rate,
		RateRetryAfter:    o.rateRetryAfter,
		RateHeaders:       o.rateHeaders,
		Quota:             o.quota,
		WebhookURL:        o.webhookURL,
		WebhookSecret:     o.webhookSecret,
	}
	if len(o.rate) == 0 && len(o.quota) == 0 {
		switch {
		case o.rateRetryAfter:
			return cfg, errors.New("--rate-retry-after needs --rate: without a limit there is no 429 to carry it")
		case o.rateHeaders:
			return cfg, errors.New("--rate-headers needs --rate: without a limit there are no RateLimit fields to send")
		}
	}
	for _, v := range o.faults {
		faults, err := fakeapi.ParseFaults(v)
		if err != nil {
			return cfg, err
		}
		cfg.Faults = append(cfg.Faults, faults...)
	}
	if o.latency > 0 {
		cfg.Faults = append(cfg.Faults, fakeapi.Fault{Kind: fakeapi.FaultLatency, Delay: o.latency})
	}
	if o.webhookURL != "" {
		if err := (fakeapi.Config{WebhookURL: o.webhookURL, WebhookSecret: o.webhookSecret}).Check(); err != nil {
			return cfg, fmt.Errorf("--webhook-url/--webhook-secret: %v", err)
		}
	}
	for _, v := range o.apiKeys {
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				cfg.APIKeys = append(cfg.APIKeys, k)
			}
		}
	}
	return cfg, nil
}

// newLogger builds the stderr logger from --log-format and --log-level.
func (o *options) newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
}

// rateValue is the --rate flag: limits as fakeapi.ParseRate reads them.
// Repeating the flag adds limits; all of them must hold.
type rateValue []fakeapi.RateLimit

func (r *rateValue) Set(s string) error {
	limits, err := fakeapi.ParseRate(s)
	if err != nil {
		return err
	}
	*r = append(*r, limits...)
	return nil
}

func (r *rateValue) String() string {
	parts := make([]string, len(*r))
	for i, l := range *r {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

func (r *rateValue) Type() string { return "rate" }

// quotaValue is the --quota flag: quotas as fakeapi.ParseQuota reads them.
type quotaValue []fakeapi.Quota

func (q *quotaValue) Set(s string) error {
	quotas, err := fakeapi.ParseQuota(s)
	if err != nil {
		return err
	}
	*q = append(*q, quotas...)
	return nil
}

func (q *quotaValue) String() string {
	parts := make([]string, len(*q))
	for i, l := range *q {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

func (q *quotaValue) Type() string { return "quota" }

// byteSize is a flag value in bytes that also reads KiB, MiB and GiB
// (K/KB, M/MB, G/GB are taken as the same binary units).
type byteSize int64

var byteUnits = []struct {
	name     string
	size     int64
	suffixes []string
}{
	{"GiB", 1 << 30, []string{"gib", "gb", "g"}},
	{"MiB", 1 << 20, []string{"mib", "mb", "m"}},
	{"KiB", 1 << 10, []string{"kib", "kb", "k"}},
	{"", 1, []string{"b", ""}},
}

func (b *byteSize) Set(s string) error {
	v := strings.ToLower(strings.TrimSpace(s))
	for _, u := range byteUnits {
		for _, suffix := range u.suffixes {
			num, ok := strings.CutSuffix(v, suffix)
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q is not a positive size such as 10MiB or 1048576", s)
			}
			*b = byteSize(n * u.size)
			return nil
		}
	}
	return fmt.Errorf("%q is not a size", s)
}

// String renders the size in the largest unit that divides it.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range byteUnits {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Type() string { return "size" }
