package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// report is step 6: the figures, from the outbox and the fake API's
// ledger, and the promises checked against them.
type report struct {
	Committed  int
	RolledBack int
	// RolledBackReached are keys of rolled-back invoices that reached the
	// API at all, in a request or in the ledger. The promise: none.
	RolledBackReached []string
	Sent              int
	// Unsent are committed intents not sent. The promise: none.
	Unsent     int
	Replayed   int
	Killed     bool
	Deliveries int
	// Duplicates counts deliveries beyond the first, per idempotency key
	// or per recipient and subject, whichever finds more. The promise: 0.
	Duplicates int
	// DuplicateOf names what was delivered more than once.
	DuplicateOf []string
	// Bounced counts the run's invoice intents with delivery status
	// bounced. The promise: 1, the email to BouncedAddress, which is on
	// the suppression list (BounceListed).
	Bounced        int
	BouncedAddress string
	BounceListed   bool
	// ReminderState is the state of the next email to the bounced address,
	// and ReminderCalls the API requests made for it. The promise:
	// suppressed, and 0.
	ReminderState outbox.State
	ReminderCalls int
	// StatusHook is true when the demo's status hook was enabled (and
	// StatusHookSkipped when a function of your own kept it out); Emailed
	// is what it wrote. The promise: every invoice sent has emailed_times
	// 1 and emailed_at set, the replayed ones included; none has more, and
	// none whose email is not sent has any.
	StatusHook        bool
	StatusHookSkipped bool
	Emailed           store.DemoEmailed
	Elapsed           time.Duration
}

// buildReport reads the figures once every intent is settled.
func (d *demo) buildReport(ctx context.Context, res *runResult, b *bounceResult) (*report, error) {
	committed, declined := d.plan.committed(), d.plan.declined()
	r := &report{Committed: len(committed), RolledBack: len(declined), Killed: res.Killed}
	r.BouncedAddress, r.ReminderState = b.Invoice.Customer.Email, b.ReminderState
	r.ReminderCalls = d.requestsFor(reminderKey(b.Invoice))
	var err error
	if r.BounceListed, err = d.suppressed(ctx, r.BouncedAddress); err != nil {
		return nil, err
	}
	if r.Bounced, err = store.DemoCountBounced(ctx, d.pool, d.plan.keyPrefix()); err != nil {
		return nil, fmt.Errorf("demo: read the outbox: %w", err)
	}

	r.StatusHook, r.StatusHookSkipped = d.statusHook, d.statusHookSkipped
	if r.StatusHook {
		if r.Emailed, err = store.DemoReadEmailed(ctx, d.pool, d.plan.keyPrefix()); err != nil {
			return nil, fmt.Errorf("demo: read the invoices' emailed_at: %w", err)
		}
	}

	c, err := d.readCounts(ctx)
	if err != nil {
		return nil, err
	}
	r.Sent, r.Replayed = c.Sent, c.Replayed
	r.Unsent = r.Committed - c.Sent

	isDeclined := map[string]bool{}
	for _, k := range keys(declined) {
		isDeclined[k] = true
	}
	reached := map[string]bool{}
	for _, req := range d.fake.Requests() {
		reached[req.IdempotencyKey] = true
	}
	perKey := map[string]int{}
	perMail := map[string]int{}
	for _, dl := range d.fake.Deliveries() {
		r.Deliveries++
		perKey[dl.IdempotencyKey]++
		reached[dl.IdempotencyKey] = true
		for _, to := range dl.To {
			perMail[strings.ToLower(to)+" / "+dl.Subject]++
		}
	}
	for _, k := range keys(declined) {
		if reached[k] {
			r.RolledBackReached = append(r.RolledBackReached, k)
		}
	}
	dupKeys, byKey := extra(perKey)
	dupMails, byMail := extra(perMail)
	if dupKeys >= dupMails {
		r.Duplicates, r.DuplicateOf = dupKeys, byKey
	} else {
		r.Duplicates, r.DuplicateOf = dupMails, byMail
	}
	r.Elapsed = time.Since(d.start)
	return r, nil
}

// extra counts the occurrences beyond the first, and names what occurred
// more than once.
func extra(n map[string]int) (int, []string) {
	total := 0
	var names []string
	for name, c := range n {
		if c > 1 {
			total += c - 1
			names = append(names, fmt.Sprintf("%s (%d times)", name, c))
		}
	}
	slices.Sort(names)
	return total, names
}

// printReport prints the figures, a verdict, and where to look next.
//
// It is long because it is the report's lines in the order they print.
func (d *demo) printReport(r *report) {
	d.section(6, "Report")
	row := func(label string, n int, note string) { d.say("%-22s %5d   %s", label, n, note) }
	row("invoices committed", r.Committed, "each with its email intent, in one transaction")
	if len(r.RolledBackReached) == 0 {
		row("invoices rolled back", r.RolledBack, "card declined; none of their emails reached the API")
	} else {
		row("invoices rolled back", r.RolledBack, "BROKEN: these reached the API: "+sample(r.RolledBackReached, 3))
	}
	if r.Unsent == 0 {
		row("intents sent", r.Sent, fmt.Sprintf("of %d committed", r.Committed))
	} else {
		row("intents sent", r.Sent, fmt.Sprintf("BROKEN: of %d committed, %d not sent", r.Committed, r.Unsent))
	}
	switch {
	case !r.Killed:
		row("replayed", r.Replayed, "no worker was killed, so nothing needed replaying")
	default:
		row("replayed", r.Replayed, "delivered by worker 1 before the kill; the API replayed them to worker 2")
	}
	d.printEmailed(r, row)
	if r.Deliveries == r.Committed {
		row("deliveries at the API", r.Deliveries, "one per committed invoice")
	} else {
		row("deliveries at the API", r.Deliveries, fmt.Sprintf("BROKEN: %d committed invoices", r.Committed))
	}
	if r.Duplicates == 0 {
		row("duplicates at the API", 0, "no key, and no recipient and subject, delivered twice")
	} else {
		row("duplicates at the API", r.Duplicates, "BROKEN: "+sample(r.DuplicateOf, 3))
	}
	switch {
	case r.Bounced == 1 && r.BounceListed:
		row("bounced", r.Bounced, r.BouncedAddress+", by webhook; now on the suppression list")
	case r.Bounced == 1:
		row("bounced", r.Bounced, "BROKEN: "+r.BouncedAddress+" is not on the suppression list")
	default:
		row("bounced", r.Bounced, "BROKEN: want 1, the email to "+r.BouncedAddress)
	}
	suppressed := 0
	if r.ReminderState == outbox.StateSuppressed {
		suppressed = 1
	}
	if suppressed == 1 && r.ReminderCalls == 0 {
		row("suppressed", suppressed, "the next email to the bounced address; 0 API calls")
	} else {
		row("suppressed", suppressed, fmt.Sprintf("BROKEN: the next email to the bounced address ended %q, %d API calls",
			r.ReminderState, r.ReminderCalls))
	}
	if err := r.check(); err == nil {
		d.printf("\nEvery committed invoice's email went out exactly once, through a SIGKILL, and no rolled-back\n")
		d.printf("invoice's email went out at all; the address that bounced got nothing more.")
		if r.StatusHook {
			d.printf(" The status hook\nset each invoice's emailed_at once, with the record of its email sent.")
		}
		d.printf(" The demo took %s.\n", round(r.Elapsed))
	}

	d.printf("\nWhere to look next\n")
	cmd := d.opts.Command
	next := [][2]string{
		{cmd + " status", "intents by state, and the age of the oldest waiting one"},
		{cmd + " list --state sent", "each intent: its key, the API's message id, replayed"},
		{cmd + " suppression list", "the addresses not mailed again: bounced, complained, by hand"},
		{cmd + " work", "a worker; it serves the outbox page, " + outboxPage + ": these intents in a browser"},
		{"docs/guarantee.md", "what sendonce promises, and its limits"},
		{"docs/webhooks.md", "delivery webhooks, bounces and the suppression list"},
		{"docs/status-callbacks.md", "the status hook: your tables told of each email's fate, in its transaction"},
		{"make test", "the test suite, with integration tests that kill workers mid-send"},
	}
	width := 0
	for _, l := range next {
		width = max(width, len(l[0]))
	}
	for _, l := range next {
		d.say("%-*s  %s", width, l[0], l[1])
	}
	switch {
	case d.throwaway && d.opts.Keep:
		d.say("These commands need the database: it stays up below.")
	case d.throwaway:
		d.say("This database is thrown away now. To keep it up after the report and look at its rows")
		d.say("with the commands above, run the demo with --keep: %s demo --keep", cmd)
		d.say("(or on a database of yours: DATABASE_URL=postgres://... %s demo).", cmd)
	default:
		d.say("This run's %d intents stay in sendonce_outbox for those commands (keys %s…", r.Committed+1, d.plan.keyPrefix())
		d.say("and %s); the table demo_invoices is dropped, and %s is", reminderKey(d.plan.bounced()), r.BouncedAddress)
		if r.StatusHook {
			d.say("taken off the suppression list. The status hook is disabled and its function dropped.")
		} else {
			d.say("taken off the suppression list.")
		}
	}
	d.printf("\n")
}

// printEmailed prints the status hook's row: emailed_at set once for every
// invoice sent, the replayed ones counted.
func (d *demo) printEmailed(r *report, row func(string, int, string)) {
	const label = "emailed_at set once"
	e := r.Emailed
	switch {
	case r.StatusHookSkipped:
		d.say("%-22s %5s   %s", label, "-", "skipped: this database has a sendonce_on_status of its own")
		return
	case !r.StatusHook:
		d.say("%-22s %5s   %s", label, "-", "BROKEN: the status hook was not enabled")
		return
	}
	replayed := ""
	if r.Killed {
		replayed = fmt.Sprintf(", %d of them replayed after the kill", e.OnceReplayed)
	}
	if broken := emailedBroken(e); len(broken) == 0 {
		row(label, e.Once, fmt.Sprintf("of %d invoices sent%s", e.Sent, replayed))
	} else {
		row(label, e.Once, "BROKEN: "+strings.Join(broken, "; "))
	}
}

// emailedBroken names what the status hook's figures break, or nothing:
// every invoice sent, replayed or not, has emailed_at set and
// emailed_times 1; none has more; none whose email is not sent has any.
func emailedBroken(e store.DemoEmailed) []string {
	var broken []string
	if e.Once != e.Sent {
		broken = append(broken, fmt.Sprintf("emailed_at set once for %d of %d invoices sent (%d of %d replayed)",
			e.Once, e.Sent, e.OnceReplayed, e.Replayed))
	}
	if e.More > 0 {
		broken = append(broken, fmt.Sprintf("%d invoices have emailed_times above 1", e.More))
	}
	if e.Unsent > 0 {
		broken = append(broken, fmt.Sprintf("%d invoices have emailed_at set for an email not sent", e.Unsent))
	}
	return broken
}

// check returns an error naming every broken promise, or nil.
func (r *report) check() error {
	var broken []string
	if n := len(r.RolledBackReached); n > 0 {
		broken = append(broken, fmt.Sprintf("%d emails of rolled-back invoices reached the API", n))
	}
	if r.Unsent > 0 {
		broken = append(broken, fmt.Sprintf("%d committed intents were not sent", r.Unsent))
	}
	if r.Duplicates > 0 {
		broken = append(broken, fmt.Sprintf("%d emails were delivered more than once", r.Duplicates))
	}
	if r.Deliveries != r.Committed {
		broken = append(broken, fmt.Sprintf("the API delivered %d emails for %d committed invoices", r.Deliveries, r.Committed))
	}
	if r.Bounced != 1 {
		broken = append(broken, fmt.Sprintf("%d invoice emails bounced, want 1 (to %s)", r.Bounced, r.BouncedAddress))
	}
	if !r.BounceListed {
		broken = append(broken, fmt.Sprintf("the bounced address %s is not on the suppression list", r.BouncedAddress))
	}
	if r.ReminderCalls > 0 {
		broken = append(broken, fmt.Sprintf("the next email to the bounced address reached the API %d times", r.ReminderCalls))
	}
	if r.ReminderState != outbox.StateSuppressed {
		broken = append(broken, fmt.Sprintf("the next email to the bounced address ended %q, not suppressed", r.ReminderState))
	}
	switch {
	case r.StatusHook:
		broken = append(broken, emailedBroken(r.Emailed)...)
	case !r.StatusHookSkipped:
		broken = append(broken, "the status hook was not enabled")
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errInvariant, strings.Join(broken, "; "))
}
