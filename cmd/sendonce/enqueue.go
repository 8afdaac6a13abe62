package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/outbox"
)

const enqueueLong = `enqueue writes one intent to the outbox, in a transaction of its own, for
"sendonce work" to send. The body is the JSON of the API call, exactly as the
API takes it (camelCase names; for a batch, {"emails": [...]}), read from
--file, or from stdin when --file is absent or "-".

--key is the idempotency key. Derive it from the cause of the send
("invoice:inv_4192", "welcome:user_17"), never from a clock: enqueueing the
same key with the same body again is a no-op that prints "already enqueued"
and exits 0, so a script may safely run twice. The same key with another body
is refused. Keys are 1 to 255 characters of letters, digits, "_", ".", ":"
and "-".

Bad input (malformed JSON, missing fields, a bad key) is refused before
anything is written.

--run KEY enqueues the members of a run (a billing run, a campaign) instead,
all in one transaction: the input is NDJSON, one member per line, each a JSON
object {"key": …, "payload": {…}} with optional "kind", "templateId",
"sendAt", "topic" and "tenant"; --send-at holds the whole run, --tenant
names its tenant (a member naming another is refused). Running it again is idempotent as a
whole: members already there are left as they are.`

const enqueueExamples = `  sendonce enqueue --key invoice:inv_4192 --file invoice.json
  echo '{"from":"billing@example.com","to":"ada@example.com","subject":"Hi","text":"Hello"}' |
    sendonce enqueue --key welcome:user_17
  sendonce enqueue --key digest:2030-01-02:user_17 --kind template --template weekly-digest \
    --send-at 2030-01-02T08:00:00Z --file props.json --json
  sendonce enqueue --run billing:2026-12 --file december.ndjson`

type enqueueOptions struct {
	key      string
	kind     string
	template string
	sendAt   string
	file     string
	queue    string
	json     bool
	run      string
	topic    string
	tenant   string
	breaker  breakerFlags
}

// enqueueOutput is enqueue's --json answer.
type enqueueOutput struct {
	// AlreadyEnqueued is true when the same intent was already there.
	AlreadyEnqueued bool           `json:"alreadyEnqueued"`
	Intent          *outbox.Record `json:"intent"`
}

func (a *app) enqueueCommand() *cobra.Command {
	o := &enqueueOptions{}
	cmd := &cobra.Command{
		Use:     "enqueue --key KEY [--kind KIND] [--template ID] [--send-at TIME] [--file F]",
		Short:   "Enqueue one send intent (the API body as JSON, from a file or stdin)",
		Long:    enqueueLong,
		Example: enqueueExamples,
		Args:    noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return a.enqueue(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "idempotency key, derived from the cause of the send (required)")
	f.StringVar(&o.kind, "kind", string(outbox.KindEmail), "which send call: email, batch, template or broadcast")
	f.StringVar(&o.template, "template", "", "template id or slug (kind template only)")
	f.StringVar(&o.sendAt, "send-at", "", "hold the send until this RFC 3339 time (e.g. 2030-01-02T08:00:00Z)")
	f.StringVar(&o.file, "file", "", `read the JSON body from this file; "-" or absent: stdin`)
	f.StringVar(&o.queue, "queue", outbox.DefaultQueue, "queue whose workers' drains send the intent; the worker must work the same queue")
	f.StringVar(&o.run, "run", "", "enqueue the members of this run, read as NDJSON (one member per line), instead of one intent")
	f.StringVar(&o.topic, "topic", "", "the intent's topic (with --run: the run's), e.g. digest: List-Unsubscribe headers, and no send to an address unsubscribed from it")
	f.StringVar(&o.tenant, "tenant", "", "the intent's tenant (with --run: the run's and its members'), e.g. acme; none: the default tenant")
	f.BoolVar(&o.json, "json", false, "print the intent as JSON")
	o.breaker.add(f, "with --run, for a new run: the ")
	bindEnv(f, "queue", "SENDONCE_QUEUE")
	return cmd
}

// readIntent checks the flags and reads the body, before any connection.
func (a *app) readIntent(o *enqueueOptions) (outbox.Intent, error) {
	in := outbox.Intent{Key: o.key, Kind: outbox.Kind(o.kind), TemplateID: o.template, Topic: o.topic, Tenant: o.tenant}
	if err := outbox.ValidateTopic(o.topic); err != nil {
		return in, usageError{err}
	}
	if err := outbox.ValidateTenant(o.tenant); err != nil {
		return in, usageError{err}
	}
	if o.key == "" {
		return in, usagef("--key is required: derive it from the cause of the send, e.g. --key invoice:inv_4192")
	}
	if err := outbox.ValidateKey(o.key); err != nil {
		return in, usageError{err}
	}
	if !in.Kind.Valid() {
		return in, usagef("unknown --kind %q: want email, batch, template or broadcast", o.kind)
	}
	if in.Kind == outbox.KindTemplate && o.template == "" {
		return in, usagef("--kind template needs --template ID")
	}
	if in.Kind != outbox.KindTemplate && o.template != "" {
		return in, usagef("--template is only for --kind template (kind is %s)", in.Kind)
	}
	if o.sendAt != "" {
		t, err := time.Parse(time.RFC3339, o.sendAt)
		if err != nil {
			return in, usagef("--send-at %q is not an RFC 3339 time (like 2030-01-02T08:00:00Z)", o.sendAt)
		}
		in.SendAt = t
	}
	if o.queue == "" {
		return in, usagef("--queue must not be empty")
	}

	var r io.Reader
	source := "stdin"
	if o.file == "" || o.file == "-" {
		if isTerminal(a.stdin) {
			return in, usagef("no body: pipe the JSON body on stdin or give --file F")
		}
		r = a.stdin
	} else {
		f, err := os.Open(o.file)
		if err != nil {
			return in, fmt.Errorf("cannot read the body: %w", err)
		}
		defer f.Close()
		r, source = f, o.file
	}
	body, err := io.ReadAll(io.LimitReader(r, outbox.MaxPayloadBytes+1))
	if err != nil {
		return in, fmt.Errorf("cannot read the body from %s: %w", source, err)
	}
	if len(body) > outbox.MaxPayloadBytes {
		return in, fmt.Errorf("the body from %s is over the 1 MiB limit", source)
	}
	if len(body) == 0 {
		return in, fmt.Errorf("no body: %s is empty; give the JSON body of the API call", source)
	}
	in.Payload = body
	if err := in.Validate(); err != nil {
		return in, fmt.Errorf("body from %s: %s", source, strings.TrimPrefix(err.Error(), "sendonce: "))
	}
	return in, nil
}

func (a *app) enqueue(cmd *cobra.Command, o *enqueueOptions) error {
	if o.run != "" {
		return a.enqueueRun(cmd, o)
	}
	if o.breaker.set() {
		return usagef("--bounce-threshold, --complaint-threshold, --min-outcomes and --no-breaker are a run's: give --run")
	}
	in, err := a.readIntent(o)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	pool, err := a.connect(ctx, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	ob, err := outbox.New(pool, &outbox.Config{Queue: o.queue})
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := ob.Enqueue(ctx, tx, in)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if res.Existing {
		a.logger.Debug("intent already enqueued", "key", res.Record.Key, "state", string(res.Record.State))
	} else {
		a.logger.Debug("intent enqueued", "key", res.Record.Key, "id", res.Record.ID)
	}
	if o.json {
		return printJSON(a.stdout, enqueueOutput{AlreadyEnqueued: res.Existing, Intent: res.Record})
	}
	verb := "enqueued"
	if res.Existing {
		verb = "already enqueued"
	}
	fmt.Fprintf(a.stdout, "%s %s\n", verb, summary(res.Record))
	return nil
}

// runOutput is `enqueue --run`'s --json answer.
type runOutput struct {
	Run      string `json:"run"`
	Created  bool   `json:"created"`
	Enqueued int    `json:"enqueued"`
	Existing int    `json:"existing"`
}

// enqueueRun enqueues a run's members from NDJSON in one transaction.
func (a *app) enqueueRun(cmd *cobra.Command, o *enqueueOptions) error {
	switch {
	case o.key != "" || o.template != "" || o.kind != string(outbox.KindEmail):
		return usagef("--run reads each member's key, kind and template from its NDJSON line: drop --key, --kind and --template")
	case o.queue == "":
		return usagef("--queue must not be empty")
	}
	if err := outbox.ValidateTenant(o.tenant); err != nil {
		return usageError{err}
	}
	run := outbox.Run{Key: o.run, Topic: o.topic, Tenant: o.tenant}
	if o.breaker.set() {
		b, err := o.breaker.breaker(outbox.Breaker{})
		if err != nil {
			return err
		}
		run.Breaker = &b
	}
	if o.sendAt != "" {
		t, err := time.Parse(time.RFC3339, o.sendAt)
		if err != nil {
			return usagef("--send-at %q is not an RFC 3339 time (like 2030-01-02T08:00:00Z)", o.sendAt)
		}
		run.SendAt = t
	}
	r, source := io.Reader(a.stdin), "stdin"
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return fmt.Errorf("cannot read the members: %w", err)
		}
		defer f.Close()
		r, source = f, o.file
	} else if isTerminal(a.stdin) {
		return usagef("no members: pipe NDJSON on stdin or give --file F")
	}
	intents, err := readRunIntents(r, source)
	if err != nil {
		return err
	}
	run.Intents = intents
	ctx := cmd.Context()
	res, err := withPool(ctx, a, o.queue, func(ob *outbox.Outbox, pool *pgxpool.Pool) (res *outbox.RunResult, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err = ob.EnqueueRun(ctx, tx, run)
			return err
		})
		return res, err
	})
	if err != nil {
		return err
	}
	out := runOutput{Run: run.Key, Created: res.Created}
	for _, r := range res.Intents {
		if r.Existing {
			out.Existing++
		} else {
			out.Enqueued++
		}
	}
	if o.json {
		return printJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "enqueued run %s: %d members new, %d already there\n", run.Key, out.Enqueued, out.Existing)
	return nil
}
