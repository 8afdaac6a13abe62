package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/internal/base/store"
)

// The application's books: demo_invoices.emailed_at, set through the
// status hook (issue 47) when the invoice's email is recorded sent, in the
// transaction that records it. The workers are separate processes, so the
// demo uses the hook's SQL interface, as a producer in another language
// would: a function sendonce_on_status the application defines, enabled
// with sendonce_status_hook_enable().

// dropLeftoverHook removes the demo's own status hook left by a run killed
// before its cleanup, before the table its function updates is dropped
// and made anew. A function of yours of that name is left alone: the
// demo then skips its hook (hookSkipped).
func (d *demo) dropLeftoverHook(ctx context.Context) error {
	if d.throwaway {
		return nil
	}
	if _, err := store.DemoDropStatusHook(ctx, d.pool); err != nil {
		return fmt.Errorf("demo: drop a status hook left by an earlier demo: %w", err)
	}
	return nil
}

// enableHook defines the demo's sendonce_on_status and enables the hook,
// in one transaction, and tells the reader; demo_invoices exists. On a
// database of your own whose sendonce_on_status is not the demo's, it
// skips the hook and says so.
func (d *demo) enableHook(ctx context.Context) error {
	d.say("And the application's own books: demo_invoices.emailed_at, set by the status hook, a SQL")
	d.say("function of yours that the worker calls in the very transaction that records an email")
	d.say("\"sent\": the invoice's emailed_at commits with that record, or not at all.")
	if !d.throwaway {
		exists, _, err := store.DemoStatusHookOwner(ctx, d.pool)
		if err != nil {
			return fmt.Errorf("demo: look for a status hook: %w", err)
		}
		if exists {
			d.skipHook()
			return nil
		}
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return store.DemoEnableStatusHook(ctx, tx) })
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42723" { // duplicate_function: yours, created just now
		d.skipHook()
		return nil
	}
	if err != nil {
		return fmt.Errorf("demo: enable the status hook: %w", err)
	}
	if !d.throwaway {
		d.onCleanup("disabled the status hook and dropped sendonce_on_status", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := store.DemoDropStatusHook(ctx, d.pool)
			return err
		})
	}
	for _, line := range strings.Split(store.DemoOnStatusFunction+";", "\n") {
		d.say("  %s", line)
	}
	d.say("  %s;", store.DemoStatusHookEnable)
	d.say("A worker killed between the API's delivery and that record leaves emailed_at unset; the")
	d.say("worker that replays the send sets it, once. The report counts them.")
	d.statusHook = true
	return nil
}

// skipHook says why the demo leaves the status hook out.
func (d *demo) skipHook() {
	d.statusHookSkipped = true
	d.say("SKIPPED: this database has a sendonce_on_status of its own, which the demo does not")
	d.say("replace; demo_invoices.emailed_at stays unset (see docs/demo.md for the function).")
}
