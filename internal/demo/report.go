package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// report is step 5: the figures, from the outbox and the fake API's
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
	Elapsed     time.Duration
}

// buildReport reads the figures once every intent is settled.
func (d *demo) buildReport(ctx context.Context, res *runResult) (*report, error) {
	committed, declined := d.plan.committed(), d.plan.declined()
	r := &report{Committed: len(committed), RolledBack: len(declined), Killed: res.Killed}

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
func (d *demo) printReport(r *report) {
	d.section(5, "Report")
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
	if err := r.check(); err == nil {
		d.printf("\nEvery committed invoice's email went out exactly once, through a SIGKILL, and no rolled-back\n")
		d.printf("invoice's email went out at all. The demo took %s.\n", round(r.Elapsed))
	}

	d.printf("\nWhere to look next\n")
	d.say("%-28s %s", "sendonce status", "intents by state, and the age of the oldest waiting one")
	d.say("%-28s %s", "sendonce list --state sent", "each intent: its key, the API's message id, the replayed flag")
	d.say("%-28s %s", "README.md", `"The guarantee, and its limits"; "Many workers, many machines"`)
	d.say("%-28s %s", "make test", "the test suite, with integration tests that kill workers mid-send")
	if d.throwaway {
		d.say("This database is thrown away now. To keep the rows and look at them with the commands")
		d.say("above, run the demo on a database of yours: DATABASE_URL=postgres://... sendonce demo")
	} else {
		d.say("This run's %d intents stay in sendonce_outbox (keys %s…) for those commands;", r.Committed, d.plan.keyPrefix())
		d.say("only the table demo_invoices is dropped.")
	}
	d.printf("\n")
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
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errInvariant, strings.Join(broken, "; "))
}
