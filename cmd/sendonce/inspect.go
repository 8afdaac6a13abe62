package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/outbox"
)

// statusOutput is status's --json answer.
type statusOutput struct {
	Counts               map[outbox.State]int64          `json:"counts"`
	Deliveries           map[outbox.DeliveryStatus]int64 `json:"deliveries"`
	OldestPendingSeconds float64                         `json:"oldestPendingSeconds"`
	Budgets              []budget.Status                 `json:"budgets"`
}

func (a *app) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count intents by state and age the oldest pending one",
		Long: `status counts the outbox's intents in each state (pending, sending, sent, failed,
canceled, suppressed) and gives the age of the oldest intent that is due and not yet sent.
A growing age means the worker is not keeping up, or not running.

It counts sent intents by delivery status too (delivery_delayed, delivered,
failed, bounced, suppressed, complained), as the API's delivery webhooks
reported them (see work --webhook-addr).

It also shows the fleet's send budget for each API key (by its fingerprint,
never the key): the rate the workers send at, the configured limit, and
whether a Retry-After has paused them.`,
		Example: `  sendonce status
  sendonce status --json | jq .counts.failed`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			var budgets []budget.Status
			ctx := cmd.Context()
			st, err := withPool(ctx, a, "", func(ob *outbox.Outbox, pool *pgxpool.Pool) (*outbox.Stats, error) {
				st, err := ob.Stats(ctx)
				if err == nil {
					budgets, err = budget.Read(ctx, pool)
				}
				return st, err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, statusOutput{Counts: st.Counts, Deliveries: st.Deliveries,
					OldestPendingSeconds: math.Round(st.OldestPending.Seconds()*1000) / 1000, Budgets: budgets})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			for _, s := range outbox.States {
				fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
			}
			for _, d := range outbox.DeliveryStatuses {
				fmt.Fprintf(tw, "delivery %s\t%d\n", d, st.Deliveries[d])
			}
			oldest := "none"
			switch {
			case st.OldestPending > 0:
				oldest = st.OldestPending.Round(time.Second).String()
			case st.Counts[outbox.StatePending] > 0:
				// Pending but not due: every one waits for its send_at.
				oldest = "none due (the pending intents are scheduled later)"
			}
			fmt.Fprintf(tw, "oldest pending\t%s\n", oldest)
			for _, b := range budgets {
				fmt.Fprintf(tw, "send budget %s\t%s\n", b.KeyFingerprint, b.Describe())
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func (a *app) showCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show KEY",
		Short: "Show one intent by its idempotency key",
		Long: `show prints one intent: its state, attempts, the API's message id once sent,
the last error, and its times. The payload (the message) is printed with
--json only.`,
		Example: `  sendonce show invoice:inv_4192
  sendonce show invoice:inv_4192 --json`,
		Args: keyArg,
		RunE: a.intentRunE(&asJSON, getOrPruned, printRecord),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the intent as JSON, payload included")
	return cmd
}

func (a *app) listCommand() *cobra.Command {
	var (
		asJSON   bool
		state    string
		delivery string
		tenant   string
		limit    int
		after    int64
	)
	cmd := &cobra.Command{
		Use:   "list [--state S] [--delivery D] [--tenant T] [--limit N] [--after ID]",
		Short: "List intents in id order, optionally of one state or delivery status",
		Long: `list prints intents in id order, a page at a time: --limit caps the page, and
--after ID continues after the last id of the previous page (printed as a hint
when the page is full). --delivery keeps the intents whose delivery status
(from the API's delivery webhooks) is one of delivery_delayed, delivered,
failed, bounced, suppressed or complained. --tenant keeps one tenant's intents
("default": those that name none).`,
		Example: `  sendonce list --state failed
  sendonce list --delivery bounced
  sendonce list --limit 500 --after 1200 --json`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			st := outbox.State(strings.ToLower(state))
			if st != "" && !st.Valid() {
				return usagef("unknown --state %q: want %s", state, stateList)
			}
			dl := outbox.DeliveryStatus(strings.ToLower(delivery))
			if dl != "" && !dl.Valid() {
				return usagef("unknown --delivery %q: want delivery_delayed, delivered, failed, bounced, suppressed or complained", delivery)
			}
			if limit < 1 || limit > 10_000 {
				return usagef("--limit %d: want 1 to 10000", limit)
			}
			if tenant != outbox.DefaultTenant {
				if err := outbox.ValidateTenant(tenant); err != nil {
					return usageError{err}
				}
			}
			if after < 0 {
				return usagef("--after %d: want an id, 0 or more", after)
			}
			recs, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) ([]*outbox.Record, error) {
				return ob.List(ctx, &outbox.ListParams{State: st, Delivery: dl, Tenant: tenant, AfterID: after, Limit: limit})
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONArray(a.stdout, recs)
			}
			if len(recs) == 0 {
				fmt.Fprintln(a.stdout, "no intents")
				return nil
			}
			printTable(a.stdout, recs)
			if len(recs) == limit {
				fmt.Fprintf(a.stdout, "more may follow: --after %d\n", recs[len(recs)-1].ID)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the intents as a JSON array, payloads included")
	f.StringVar(&state, "state", "", "only intents in this state: "+stateList)
	f.StringVar(&delivery, "delivery", "",
		"only intents with this delivery status: delivery_delayed, delivered, failed, bounced, suppressed or complained")
	f.StringVar(&tenant, "tenant", "", `only intents of this tenant ("default": those that name none)`)
	f.IntVar(&limit, "limit", 100, "at most this many intents (1 to 10000)")
	f.Int64Var(&after, "after", 0, "only intents with an id above this one (to page)")
	return cmd
}

// intentRunE is the RunE of show and cancel: one call on the intent the
// argument names, and the intent it returns printed as JSON with --json, or
// else by text.
func (a *app) intentRunE(asJSON *bool, call func(*outbox.Outbox, context.Context, string) (*outbox.Record, error), text func(io.Writer, *outbox.Record)) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		rec, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (*outbox.Record, error) {
			return call(ob, ctx, args[0])
		})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(a.stdout, rec)
		}
		text(a.stdout, rec)
		return nil
	})
}

// fromOutbox makes one call on an Outbox over a connection of its own (on
// queue, or the default), then closes the connection: each operator
// command reads or changes the outbox with a single call.
// (The Outbox comes first, as in a method expression: (*outbox.Outbox).Get.)
func fromOutbox[T any](ctx context.Context, a *app, queue string, call func(*outbox.Outbox, context.Context) (T, error)) (T, error) {
	return withPool(ctx, a, queue, func(ob *outbox.Outbox, _ *pgxpool.Pool) (T, error) { return call(ob, ctx) })
}

// withPool is fromOutbox for a call that also needs the connection: a
// transaction of its own, or a read beside the outbox's.
func withPool[T any](ctx context.Context, a *app, queue string, call func(*outbox.Outbox, *pgxpool.Pool) (T, error)) (T, error) {
	var zero T
	pool, err := a.connect(ctx, 0)
	if err != nil {
		return zero, err
	}
	defer pool.Close()
	ob, err := outbox.New(pool, &outbox.Config{Queue: queue})
	if err != nil {
		return zero, err
	}
	return call(ob, pool)
}

// getOrPruned is the intent with key, or what retention kept of it.
func getOrPruned(ob *outbox.Outbox, ctx context.Context, key string) (*outbox.Record, error) {
	rec, err := ob.Get(ctx, key)
	if errors.Is(err, outbox.ErrNotFound) {
		if pruned, perr := ob.Pruned(ctx, key); perr == nil {
			return pruned, nil
		}
	}
	return rec, err
}

// stateList names every state an intent can be in, for --state's help and
// errors: "pending, sending, sent, failed, canceled or suppressed".
var stateList = func() string {
	names := make([]string, len(outbox.States))
	for i, s := range outbox.States {
		names[i] = string(s)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}()
