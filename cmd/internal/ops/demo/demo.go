package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// DefaultInvoices is the size of the invoice run when Options.Invoices is
// zero.
const DefaultInvoices = 200

// Queue is the River queue of the demo's send jobs. It is not the default
// queue, so on a database of your own the demo's workers never pick up your
// application's jobs.
const Queue = "sendonce_demo"

// Options configure Run. The zero value runs the full demo on a throwaway
// PostgreSQL, writing to os.Stdout.
type Options struct {
	// DatabaseURL is the PostgreSQL database to use. Empty: start a
	// throwaway cluster from the machine's server binaries and remove it
	// at the end.
	DatabaseURL string
	// Out receives the demo's story and report (default os.Stdout). When it
	// is a terminal, progress shows as a live bar.
	Out io.Writer
	// Logger receives details for debugging, among them every log line of
	// the worker processes at debug level (default: discard).
	Logger *slog.Logger
	// WorkerCommand builds the command of a worker process: `sendonce work`
	// with args, and env (DATABASE_URL, OPENEMAIL_API_KEY,
	// OPENEMAIL_BASE_URL, OPENEMAIL_WEBHOOK_SECRET) added to the environment. Nil re-executes the
	// running binary (os.Executable) with "work" and args. If the returned
	// command has no Env, the demo sets os.Environ() plus env; unset Stdout
	// and Stderr go to Logger. The demo puts the process in a process group
	// of its own and signals that group.
	WorkerCommand func(ctx context.Context, env []string, args ...string) *exec.Cmd
	// Invoices is the size of the invoice run (default DefaultInvoices,
	// at least 2).
	Invoices int
	// Seed seeds the invoice run: customers, amounts and which cards are
	// declined. Zero is the default seed, 1, so every run tells the same
	// story.
	Seed int64
	// Keep, with a throwaway cluster, keeps it running after the report,
	// its URL printed, until ctx ends (Ctrl-C), so that the commands the
	// report names can look at its rows; then it is removed as ever.
	Keep bool
	// Command is how the reader runs sendonce, for the commands the report
	// suggests: "sendonce" (the default) for an installed binary, "go run
	// ./cmd/sendonce" in a checkout without one.
	Command string
}

// demoAPIKey is the worker's OpenEmail key: a test key, which the fake API
// accepts like any oe_test_ key. It is no secret.
const demoAPIKey = "oe_test_sendonce_demo"

// Run runs the demo: a database, the fake OpenEmail API, an invoice run,
// a worker killed mid-send and a second one that finishes, a bounce and
// the suppressed email after it, then a report. It returns an error when a
// step fails, when ctx is cancelled, or when the report finds a broken
// promise: an email delivered twice, an email of a rolled-back invoice
// delivered, a committed intent left unsent, an email to a bounced
// address sent, or an invoice's emailed_at not set exactly once for its
// email sent.
// Everything it started is stopped and removed before it returns.
func Run(ctx context.Context, opts Options) error {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.WorkerCommand == nil {
		opts.WorkerCommand = selfWorkerCommand
	}
	if opts.Invoices == 0 {
		opts.Invoices = DefaultInvoices
	}
	if opts.Invoices < 2 {
		return fmt.Errorf("demo: Invoices is %d; the run needs at least 2 (one committed, one declined)", opts.Invoices)
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Command == "" {
		opts.Command = "sendonce"
	}

	d := &demo{
		opts:  opts,
		out:   opts.Out,
		log:   opts.Logger,
		start: time.Now(),
	}
	d.procCtx, d.procCancel = context.WithCancel(context.WithoutCancel(ctx))
	err := d.run(ctx)
	if err == nil && opts.Keep && d.throwaway {
		d.keepUntilDone(ctx)
	} else if err != nil && ctx.Err() != nil {
		d.printf("\nInterrupted (%v); cleaning up.\n", context.Cause(ctx))
		err = fmt.Errorf("demo interrupted: %w", err)
	}
	d.cleanup()
	return err
}

// demo is one run's state, and the list of what to undo at the end.
type demo struct {
	opts  Options
	out   io.Writer
	log   *slog.Logger
	start time.Time

	pool      *pgxpool.Pool
	dbURL     string
	throwaway bool
	// otherLeader is true when another River client led the database
	// before the demo started: its rescuer, not worker 2's, will act.
	otherLeader bool
	fake        *fakeapi.Server
	ob          *outbox.Outbox
	plan        *invoicePlan
	// hookAddr is where the workers take the fake's webhooks, signed with
	// hookSecret, which is never printed.
	hookAddr   string
	hookSecret string
	// statusHook is true once the demo's status hook is enabled;
	// statusHookSkipped when a sendonce_on_status of your own kept it out.
	statusHook        bool
	statusHookSkipped bool

	// procCtx is handed to WorkerCommand. It is cancelled only in cleanup,
	// after the workers were stopped, so the caller's cancellation leaves
	// the stopping to the demo, which does it in order.
	procCtx    context.Context
	procCancel context.CancelFunc
	workers    []*workerProc

	undo []undoStep
}

// undoStep is one thing cleanup undoes; done, when set, is said after it.
type undoStep struct {
	fn   func() error
	done string
}

func (d *demo) run(ctx context.Context) error {
	d.printf("sendonce demo: an invoice run, a worker killed in the middle of sending, and not one\n")
	d.printf("email sent twice. Everything below is real: PostgreSQL, worker processes, SIGKILL.\n")

	if err := d.setupDatabase(ctx); err != nil {
		return err
	}
	d.plan = planInvoices(d.opts.Invoices, d.opts.Seed, runTag())
	if err := d.startFake(); err != nil {
		return err
	}
	if err := d.runInvoices(ctx); err != nil {
		return err
	}
	if err := d.prepareBounce(ctx); err != nil {
		return err
	}
	res, err := d.runWorkers(ctx)
	if err != nil {
		return err
	}
	bounce, err := d.runBounce(ctx, res.Last)
	if err != nil {
		return err
	}
	rep, err := d.buildReport(ctx, res, bounce)
	if err != nil {
		return err
	}
	d.printReport(rep)
	return rep.check()
}

// outboxPage is where `sendonce work` serves the outbox page by default
// (its --http-addr, 127.0.0.1:9464).
const outboxPage = "http://127.0.0.1:9464/outbox/"

// keepUntilDone keeps the throwaway cluster up until ctx ends, saying how
// to reach it: the commands, and a worker whose outbox page shows the run.
// The fake API stays up too, as that worker's API.
func (d *demo) keepUntilDone(ctx context.Context) {
	d.printf("The throwaway PostgreSQL stays up until you press Ctrl-C. In another terminal:\n")
	d.say("export DATABASE_URL='%s'", d.dbURL)
	d.say("%s status", d.opts.Command)
	d.say("OPENEMAIL_API_KEY=%s OPENEMAIL_BASE_URL=%s %s work --queue %s", demoAPIKey, d.fake.URL(), d.opts.Command, Queue)
	d.say("and open %s: the outbox page, these intents in a browser.", outboxPage)
	<-ctx.Done()
	d.printf("\n")
}

// onCleanup registers fn to run at the end, in reverse order of
// registration; done, when not empty, is reported after it ran.
func (d *demo) onCleanup(done string, fn func() error) {
	d.undo = append(d.undo, undoStep{fn: fn, done: done})
}

// cleanup stops the workers and undoes every registered step, newest
// first, and says in one line what it did.
func (d *demo) cleanup() {
	var said []string
	for _, w := range d.workers {
		if !w.exited() {
			w.stop(5 * time.Second)
			said = append(said, fmt.Sprintf("stopped worker %d", w.n))
		}
	}
	d.procCancel()
	for i := len(d.undo) - 1; i >= 0; i-- {
		step := d.undo[i]
		if err := step.fn(); err != nil {
			d.printf("Cleanup: %s: %v\n", step.done, err)
			continue
		}
		if step.done != "" {
			said = append(said, step.done)
		}
	}
	if len(said) > 0 {
		d.printf("Cleaned up: %s.\n", strings.Join(said, ", "))
	}
}

// printf writes to Out. The demo writes from one goroutine only.
func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, format, args...)
}

// section starts a numbered step.
func (d *demo) section(n int, title string) {
	d.printf("\n%d. %s\n", n, title)
}

// say writes an indented line of a step.
func (d *demo) say(format string, args ...any) {
	d.printf("   "+format+"\n", args...)
}

// runTag tells this run's invoices from an earlier run's in a database of
// your own, whose outbox rows the demo leaves behind: invoice ids, and so
// idempotency keys, must never repeat.
func runTag() string {
	return fmt.Sprintf("%04x", rand.N(0x10000))
}

// selfWorkerCommand is the default WorkerCommand: this very binary, which
// is sendonce, running "work".
func selfWorkerCommand(ctx context.Context, env []string, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	cmd := exec.CommandContext(ctx, exe, append([]string{"work"}, args...)...)
	if err != nil {
		cmd.Err = fmt.Errorf("find the sendonce binary to run as a worker: %w", err)
	}
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// round shortens a duration for display.
func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// errInvariant marks a report that found a broken promise.
var errInvariant = errors.New("demo: a promise was broken")
