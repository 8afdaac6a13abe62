package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// bounceLimit bounds each wait of the bounce step. The bounce is usually
// recorded before the step starts; the reminder is parked within a fetch
// poll of the worker.
const bounceLimit = 15 * time.Second

// bounceResult is what the bounce step saw, for the report.
type bounceResult struct {
	Invoice invoice
	// Status is the bounced invoice's delivery status, and Listed whether
	// its address is on the suppression list, when the step ended.
	Status outbox.DeliveryStatus
	Listed bool
	// ReminderState is the state the reminder settled in.
	ReminderState outbox.State
}

// reminderKey is the idempotency key of the payment reminder for inv: like
// the invoice's, derived from its cause.
func reminderKey(inv invoice) string { return "reminder:" + inv.ID }

// reminder is the reminder's payload: the next email to the customer.
func reminder(inv invoice) (json.RawMessage, error) {
	return json.Marshal(client.EmailParams{
		From:    "Acme Billing <billing@acme.example>",
		To:      client.Recipients{inv.Customer.Email},
		Subject: "Reminder: your invoice " + inv.ID + " is due",
		Text: fmt.Sprintf("Hello %s,\n\nyour invoice %s for %s is due. Thank you!\n\nAcme Billing",
			inv.Customer.First(), inv.ID, money(inv.Cents)),
	})
}

// prepareBounce readies a database of your own for the bounce step: the
// bouncing address is the demo's own, so an entry for it on the suppression
// list (left by a run that was killed before its cleanup) is removed before
// the workers start, where it would park the invoice's email; and the entry
// the bounce adds is removed at the end.
func (d *demo) prepareBounce(ctx context.Context) error {
	if d.throwaway {
		return nil
	}
	addr := d.plan.bounced().Customer.Email
	if _, err := d.ob.Unsuppress(ctx, []string{addr}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.onCleanup("took "+addr+" off the suppression list", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := d.ob.Unsuppress(ctx, []string{addr})
		return err
	})
	return nil
}

// runBounce is step 5: the bounce of one invoice's email comes back as a
// webhook, the address lands on the suppression list, and the next email
// to it is parked without an API call. It stops w, the last worker, at the
// end.
func (d *demo) runBounce(ctx context.Context, w *workerProc) (*bounceResult, error) {
	inv := d.plan.bounced()
	addr := inv.Customer.Email
	b := &bounceResult{Invoice: inv}
	d.section(5, "A bounce comes back")
	d.say("The API accepted every email, but one mailbox does not exist: %s, of invoice", addr)
	d.say("%s. Its server bounced the email, and the API said so the way it says what became", inv.ID)
	d.say("of every email: a signed webhook (email.bounced) to the workers' --webhook-addr, checked")
	d.say("against OPENEMAIL_WEBHOOK_SECRET (a random secret of this run, not shown).")

	err := d.await(ctx, w, "the bounce of "+inv.Key(), func() (bool, string, error) {
		rec, err := d.ob.Get(ctx, inv.Key())
		if err != nil {
			return false, "", fmt.Errorf("demo: %w", err)
		}
		b.Status = rec.DeliveryStatus
		if b.Listed, err = d.suppressed(ctx, addr); err != nil {
			return false, "", err
		}
		return b.Status == outbox.DeliveryBounced && b.Listed,
			fmt.Sprintf("delivery status %q, on the suppression list: %t", b.Status, b.Listed), nil
	})
	if err != nil {
		return nil, err
	}
	d.say("Worker %d stored the event: the intent %s has delivery status \"bounced\", and", w.n, inv.Key())
	d.say("%s is on the suppression list (sendonce_suppression, reason bounced).", addr)

	key := reminderKey(inv)
	d.say("A week on, invoice %s is unpaid, and the application enqueues a payment reminder", inv.ID)
	d.say("to %s the way it enqueued the invoice, in a transaction, key %q.", inv.Customer.First(), key)
	if err := d.enqueueReminder(ctx, inv); err != nil {
		return nil, err
	}
	err = d.await(ctx, w, "the reminder "+key+" to settle", func() (bool, string, error) {
		rec, err := d.ob.Get(ctx, key)
		if err != nil {
			return false, "", fmt.Errorf("demo: %w", err)
		}
		b.ReminderState = rec.State
		return rec.State != outbox.StatePending && rec.State != outbox.StateSending,
			fmt.Sprintf("state %q", rec.State), nil
	})
	if err != nil {
		return nil, err
	}
	if calls := d.requestsFor(key); b.ReminderState == outbox.StateSuppressed && calls == 0 {
		d.say("Worker %d looked its recipient up before calling the API and parked it as \"suppressed\":", w.n)
		d.say("0 API calls. An email to a bounced address would hurt the sender's reputation.")
	} else {
		d.say("BROKEN: the reminder ended %q, after %d API calls.", b.ReminderState, calls)
	}
	if err := d.stopLast(w); err != nil {
		return nil, err
	}
	return b, nil
}

// enqueueReminder enqueues inv's payment reminder in a transaction, as an
// application would.
func (d *demo) enqueueReminder(ctx context.Context, inv invoice) error {
	email, err := reminder(inv)
	if err != nil {
		return fmt.Errorf("demo: reminder for %s: %w", inv.ID, err)
	}
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := d.ob.Enqueue(ctx, tx, outbox.Intent{Key: reminderKey(inv), Payload: email})
		return err
	})
	if err != nil {
		return fmt.Errorf("demo: enqueue the reminder for %s: %w", inv.ID, err)
	}
	return nil
}

// suppressed reports whether addr is on the suppression list.
func (d *demo) suppressed(ctx context.Context, addr string) (bool, error) {
	on, err := store.DemoSuppressed(ctx, d.pool, addr)
	if err != nil {
		return false, fmt.Errorf("demo: read the suppression list: %w", err)
	}
	return on, nil
}

// requestsFor counts the requests the fake API received with key.
func (d *demo) requestsFor(key string) int {
	n := 0
	for _, r := range d.fake.Requests() {
		if r.IdempotencyKey == key {
			n++
		}
	}
	return n
}

// await polls done until it says yes, and fails when ctx ends, w dies or
// bounceLimit passes; done's text says what it saw, for that error.
func (d *demo) await(ctx context.Context, w *workerProc, what string, done func() (bool, string, error)) error {
	deadline := time.Now().Add(bounceLimit)
	for {
		ok, saw, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: gave up after %s waiting for %s (%s); worker %d's last lines:\n%s",
				bounceLimit, what, saw, w.n, w.logs.tail())
		}
		t := time.NewTimer(pollEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-w.done:
			t.Stop()
			return w.died()
		case <-t.C:
		}
	}
}
