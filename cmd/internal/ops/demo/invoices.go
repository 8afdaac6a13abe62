package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// invoice is one invoice of the run, decided before the run starts.
type invoice struct {
	ID       string
	Customer customer
	Cents    int64
	// Declined is true for an invoice whose card is declined: its
	// transaction rolls back, email intent included.
	Declined bool
	// Slow is true for an invoice whose email the fake API answers only a
	// while after delivering it: the window the kill aims at.
	Slow bool
	// Bounces is true for the one invoice whose email bounces: the API
	// accepts it, and its webhook reports email.bounced a moment later.
	Bounces bool
}

// Key is the invoice email's idempotency key, derived from the invoice
// (its cause), never from a clock: whoever sends it, however often, the
// API sees the same key.
func (inv invoice) Key() string { return "invoice:" + inv.ID }

// Subject is the email's subject, unique per invoice, so the report can
// also count deliveries per recipient and subject.
func (inv invoice) Subject() string { return "Your invoice " + inv.ID }

// email is the intent's payload: the body of POST /emails.
func (inv invoice) email() (json.RawMessage, error) {
	return json.Marshal(client.EmailParams{
		From:    "Acme Billing <billing@acme.example>",
		To:      client.Recipients{inv.Customer.Email},
		Subject: inv.Subject(),
		Text: fmt.Sprintf("Hello %s,\n\nyour invoice %s for %s is attached. Thank you!\n\nAcme Billing",
			inv.Customer.First(), inv.ID, money(inv.Cents)),
	})
}

type customer struct {
	Name, Email string
}

// First is the customer's first name.
func (c customer) First() string {
	first, _, _ := strings.Cut(c.Name, " ")
	return first
}

var customers = []customer{
	{"Ada Lovelace", "ada@example.com"},
	{"Grace Hopper", "grace@example.com"},
	{"Alan Turing", "alan@example.org"},
	{"Katherine Johnson", "katherine@example.net"},
	{"Edsger Dijkstra", "edsger@example.com"},
	{"Barbara Liskov", "barbara@example.org"},
	{"Donald Knuth", "don@example.net"},
	{"Margaret Hamilton", "margaret@example.com"},
	{"Ken Thompson", "ken@example.org"},
	{"Frances Allen", "fran@example.net"},
	{"John Backus", "john@example.com"},
	{"Radia Perlman", "radia@example.org"},
}

// bouncer is the customer of the bouncing invoice, and of no other: the
// suppression of the address touches that one customer's emails only.
var bouncer = customer{"Charles Babbage", "charles@example.org"}

// invoicePlan is the whole run, decided up front so the fake API can be
// told which sends to slow down.
type invoicePlan struct {
	tag      string
	invoices []invoice
}

// slowEvery: one committed invoice in slowEvery gets a slow answer.
const slowEvery = 8

// planInvoices decides n invoices from seed: customers, amounts, and
// exactly n/10 (at least one) declined cards. Ids are "inv_<tag>_<seq>",
// all of one width, so no key is a prefix of another.
func planInvoices(n int, seed int64, tag string) *invoicePlan {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5e7d0ce))
	width := max(4, len(fmt.Sprint(n)))
	p := &invoicePlan{tag: tag, invoices: make([]invoice, n)}
	for i := range p.invoices {
		p.invoices[i] = invoice{
			ID:       fmt.Sprintf("inv_%s_%0*d", tag, width, i+1),
			Customer: customers[rng.IntN(len(customers))],
			Cents:    int64(1500 + rng.IntN(48500)),
		}
	}
	declines := max(1, n/10)
	for _, i := range rng.Perm(n)[:declines] {
		p.invoices[i].Declined = true
	}
	j, last := 0, 0
	for i := range p.invoices {
		if p.invoices[i].Declined {
			continue
		}
		p.invoices[i].Slow = j%slowEvery == slowEvery/2
		j++
		last = i
	}
	// The last committed invoice bounces: it is among the last sent, well
	// after the kill, when a worker takes the webhooks. It is not slow, so
	// its answer does not hold up the end of the run.
	p.invoices[last].Customer = bouncer
	p.invoices[last].Bounces = true
	p.invoices[last].Slow = false
	return p
}

// keyPrefix starts the keys of this run's intents and of no other.
func (p *invoicePlan) keyPrefix() string { return "invoice:inv_" + p.tag + "_" }

// committed are the invoices whose transactions commit.
func (p *invoicePlan) committed() []invoice {
	return p.filter(func(inv invoice) bool { return !inv.Declined })
}

// declined are the invoices whose transactions roll back.
func (p *invoicePlan) declined() []invoice {
	return p.filter(func(inv invoice) bool { return inv.Declined })
}

// bounced is the invoice whose email bounces.
func (p *invoicePlan) bounced() invoice {
	return p.filter(func(inv invoice) bool { return inv.Bounces })[0]
}

// slow are the invoices whose email the fake API answers late.
func (p *invoicePlan) slow() []invoice {
	return p.filter(func(inv invoice) bool { return inv.Slow })
}

func (p *invoicePlan) filter(keep func(invoice) bool) []invoice {
	var out []invoice
	for _, inv := range p.invoices {
		if keep(inv) {
			out = append(out, inv)
		}
	}
	return out
}

func keys(invs []invoice) []string {
	out := make([]string, len(invs))
	for i, inv := range invs {
		out[i] = inv.Key()
	}
	return out
}

// errCardDeclined is the application's failure that rolls an invoice back.
var errCardDeclined = errors.New("card declined")

const createInvoicesTable = `CREATE TABLE demo_invoices (
	id             text PRIMARY KEY,
	customer_email text NOT NULL,
	amount_cents   bigint NOT NULL,
	created_at     timestamptz NOT NULL DEFAULT now(),
	emailed_at     timestamptz,
	emailed_times  int NOT NULL DEFAULT 0
)`

// runInvoices is step 3: the application's side. Every invoice is one
// transaction that writes the invoice and enqueues its email; then the
// status hook that sets the invoice's emailed_at when its email is sent.
func (d *demo) runInvoices(ctx context.Context) error {
	committed, declined := d.plan.committed(), d.plan.declined()
	d.section(3, fmt.Sprintf("An invoice run: %d invoices, each in ONE transaction with its email", len(d.plan.invoices)))

	// A table of the same name left by an interrupted run is the demo's
	// own, and so is a status hook marked as the demo's: it goes first, as
	// its function updates the table.
	if err := d.dropLeftoverHook(ctx); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, `DROP TABLE IF EXISTS demo_invoices`); err != nil {
		return fmt.Errorf("demo: drop an old demo_invoices: %w", err)
	}
	if _, err := d.pool.Exec(ctx, createInvoicesTable); err != nil {
		return fmt.Errorf("demo: create demo_invoices: %w", err)
	}
	if !d.throwaway {
		d.onCleanup("dropped the table demo_invoices", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := d.pool.Exec(ctx, `DROP TABLE IF EXISTS demo_invoices`)
			return err
		})
	}
	ob, err := outbox.New(d.pool, &outbox.Config{Queue: Queue})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.ob = ob

	example := committed[0]
	d.say("For each invoice, as your application would:")
	d.say("  tx, _ := pool.Begin(ctx)")
	d.say(`  tx.Exec(ctx, "INSERT INTO demo_invoices ...", %q, %q, %d)`, example.ID, example.Customer.Email, example.Cents)
	d.say(`  ob.Enqueue(ctx, tx, outbox.Intent{Key: %q, Payload: email})`, example.Key())
	d.say("  charge the card: declined? tx.Rollback(ctx) : tx.Commit(ctx)")
	for _, inv := range d.plan.invoices {
		if err := d.invoiceTx(ctx, inv); err != nil && !errors.Is(err, errCardDeclined) {
			return err
		}
	}

	var rows, intents int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM demo_invoices`).Scan(&rows); err != nil {
		return fmt.Errorf("demo: count invoices: %w", err)
	}
	if intents, err = store.DemoCountIntents(ctx, d.pool, d.plan.keyPrefix()); err != nil {
		return fmt.Errorf("demo: count intents: %w", err)
	}
	d.say("%d committed: %d invoice rows, and %d intents in sendonce_outbox, each with its River job.",
		len(committed), rows, intents)
	d.say("%d rolled back, card declined (e.g. %s): no invoice row, no intent, no job. Their",
		len(declined), declined[0].ID)
	d.say("emails must never go out.")
	if rows != len(committed) || intents != len(committed) {
		return fmt.Errorf("demo: %d invoices committed, but the database holds %d invoice rows and %d intents", len(committed), rows, intents)
	}
	return d.enableHook(ctx)
}

// invoiceTx is the application code the demo stands for: one transaction
// for the invoice and its email intent. A declined card rolls back both and
// returns errCardDeclined.
func (d *demo) invoiceTx(ctx context.Context, inv invoice) error {
	email, err := inv.email()
	if err != nil {
		return fmt.Errorf("demo: invoice %s: %w", inv.ID, err)
	}
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO demo_invoices (id, customer_email, amount_cents) VALUES ($1, $2, $3)`,
			inv.ID, inv.Customer.Email, inv.Cents); err != nil {
			return err
		}
		if _, err := d.ob.Enqueue(ctx, tx, outbox.Intent{Key: inv.Key(), Payload: email}); err != nil {
			return err
		}
		if inv.Declined {
			return errCardDeclined // BeginFunc rolls back
		}
		return nil
	})
	if err != nil && !errors.Is(err, errCardDeclined) {
		return fmt.Errorf("demo: invoice %s: %w", inv.ID, err)
	}
	return err
}

func money(cents int64) string {
	return fmt.Sprintf("€%d.%02d", cents/100, cents%100)
}
