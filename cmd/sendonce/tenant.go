package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/ops/tenants"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

const tenantLong = `tenant sets and shows one tenant's share of the fleet's sends and its limits
(see docs/tenants.md). Within each class (transactional intents, then those of
runs) the workers share their sends among the tenants with intents due in
proportion to their weights; a tenant's rate and quotas hold it back across the
fleet, whatever its weight.

  set NAME [--weight N] [--rate R] [--quota Q]   changes the settings given, keeps the others
  show NAME                                      settings, use, backlog, share, what holds it back
  reset NAME                                     deletes its settings: weight 1, no limits

NAME is a tenant's name, or "default" for the default tenant (the intents that
name none). A tenant without settings has weight 1 and no limits.

--weight is 1 to 1000. --rate is one rate: 5/s, 600/m or 36000/h (the bucket
holds a second of it, at least one request). --quota is a quota per UTC day or
month, or both: 10000/d, 300000/mo, 10000/d,300000/mo; it sets the tenant's
quotas to those given (a period not given has none). A quota counts first
attempts, from the time the tenant has a limit. --rate none and --quota none
remove them. Running workers take a change within a second.`

// tenantCommand declares `sendonce tenant` and its set, show and reset
// subcommands, as runCommand declares run's.
func (a *app) tenantCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Set, show or reset a tenant's weight, rate and quotas",
		Long:  tenantLong,
		Example: `  sendonce tenant set acme --weight 5
  sendonce tenant set acme --rate 5/s --quota 10000/d,300000/mo
  sendonce tenant set acme --rate none
  sendonce tenant show default
  sendonce tenant reset acme`,
	}
	var asJSON bool
	var weight int
	var rate, quota string
	var change store.TenantChange
	set := &cobra.Command{
		Use:   "set NAME [--weight N] [--rate R] [--quota Q]",
		Short: "Change a tenant's weight, rate or quotas (the others are kept)",
		Args:  tenantArg,
		RunE: onTenant(a, func(cmd *cobra.Command) (err error) {
			change, err = tenantChange(cmd, weight, rate, quota)
			return err
		}, func(ctx context.Context, pool *pgxpool.Pool, name string) (tenants.Tenant, error) {
			if err := tenants.Set(ctx, pool, name, change); err != nil {
				return tenants.Tenant{}, err
			}
			return tenants.ReadOne(ctx, pool, name)
		}, func(t tenants.Tenant) error { return a.printTenant(t, asJSON, "set tenant "+t.Name) }),
	}
	set.Flags().IntVar(&weight, "weight", 1, "its share beside the other tenants with intents due: 1 to 1000")
	set.Flags().StringVar(&rate, "rate", "", "requests at most: one rate, 5/s, 600/m or 36000/h; none: no rate")
	set.Flags().StringVar(&quota, "quota", "", "first attempts at most per UTC day or month: 10000/d, 300000/mo or both, comma-separated; none: no quota")
	set.Flags().BoolVar(&asJSON, "json", false, "print the tenant as JSON")

	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a tenant: settings, use, backlog, share, what holds it back",
		Args:  tenantArg,
		RunE: onTenant(a, nil, func(ctx context.Context, pool *pgxpool.Pool, name string) (tenants.Tenant, error) {
			return tenants.ReadOne(ctx, pool, name)
		}, func(t tenants.Tenant) error { return a.printTenant(t, asJSON, "") }),
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the tenant as JSON")

	var resetName string
	reset := &cobra.Command{
		Use:   "reset NAME",
		Short: "Delete a tenant's settings: weight 1, no limits",
		Args:  tenantArg,
		RunE: onTenant(a, nil, func(ctx context.Context, pool *pgxpool.Pool, name string) (bool, error) {
			resetName = outbox.TenantName(name)
			return tenants.Reset(ctx, pool, name)
		}, func(had bool) error {
			if had {
				fmt.Fprintf(a.stdout, "reset tenant %s: weight 1, no limits (its settings and counts are deleted)\n", resetName)
			} else {
				fmt.Fprintf(a.stdout, "tenant %s had no settings: weight 1, no limits\n", resetName)
			}
			return nil
		}),
	}
	cmd.AddCommand(set, show, reset)
	return cmd
}

// tenantsCommand declares `sendonce tenants`.
func (a *app) tenantsCommand() *cobra.Command {
	var asJSON bool
	var limit int
	var after string
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "List the tenants: weight, limits, backlog, share, what holds each back",
		Long: `tenants lists the tenants with intents pending or with settings (sendonce
tenant set), the default tenant first, then by name: each one's weight, its
limits and what it used of its quotas today and this month, its backlog
(intents pending without a River job, transactional and of runs, each counted
up to 10,000), its share of the intents the live workers claimed in the last
minute, and what holds it back now: a quota used up (until its period ends), its
rate, a paused run. See docs/tenants.md.`,
		Example: `  sendonce tenants
  sendonce tenants --json | jq '.[] | select(.heldBy != [])'`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usagef("--limit %d: want 1 to 1000", limit)
			}
			var from *string
			if cmd.Flags().Changed("after") {
				name, err := tenants.ParseName(after)
				if err != nil {
					return usageError{err}
				}
				from = &name
			}
			l, err := withTenants(cmd.Context(), a, func(ctx context.Context, pool *pgxpool.Pool) (*tenants.List, error) {
				return tenants.Read(ctx, pool, from, limit)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONArray(a.stdout, l.Tenants)
			}
			if len(l.Tenants) == 0 {
				fmt.Fprintln(a.stdout, "no tenants: none has intents pending or settings")
				return nil
			}
			err = printList(a.stdout, false, l.Tenants, "TENANT\tWEIGHT\tLIMITS\tBACKLOG\tSHARE\tHELD BY", func(t tenants.Tenant) string {
				return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s", t.Name, t.Weight, t.LimitsText(), t.Backlog, t.ShareText(), t.HeldText())
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "share: "+tenants.ShareNote(l.Claims))
			if l.Next != "" {
				fmt.Fprintf(a.stdout, "more may follow: --after %s\n", l.Next)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the tenants as a JSON array")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many tenants (1 to 1000)")
	cmd.Flags().StringVar(&after, "after", "", "page: only tenants after this one")
	return cmd
}

// printTenant prints a tenant as JSON with asJSON, or else heading (when
// not empty) and then the tenant field by field.
func (a *app) printTenant(t tenants.Tenant, asJSON bool, heading string) error {
	if asJSON {
		return printJSON(a.stdout, t)
	}
	if heading != "" {
		fmt.Fprintln(a.stdout, heading)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant:\t%s\n", t.Name)
	fmt.Fprintf(tw, "weight:\t%d\n", t.Weight)
	limits := t.LimitsText()
	if !t.Configured {
		limits += " (no settings: weight 1, no limits)"
	}
	fmt.Fprintf(tw, "limits:\t%s\n", limits)
	fmt.Fprintf(tw, "backlog:\t%s\n", t.Backlog)
	switch {
	case t.Share == nil:
		fmt.Fprintf(tw, "share:\tunknown: no live worker says what it claimed\n")
	default:
		fmt.Fprintf(tw, "share:\t%s of the intents the live workers claimed in the last minute\n", t.ShareText())
	}
	held := t.HeldText()
	if held == "-" {
		held = "nothing"
	}
	fmt.Fprintf(tw, "held by:\t%s\n", held)
	if t.UpdatedAt != nil {
		fmt.Fprintf(tw, "updated:\t%s\n", stamp(*t.UpdatedAt))
	}
	return tw.Flush()
}

// onTenant is the RunE of a tenant subcommand: the tenant its argument
// names, check's refusals of the flags (usage errors; nil: none), then one
// call on the tenant over a connection of its own, whose answer out
// prints.
func onTenant[T any](a *app, check func(*cobra.Command) error, call func(context.Context, *pgxpool.Pool, string) (T, error),
	out func(T) error) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		name, err := tenants.ParseName(args[0])
		if err != nil {
			return usageError{err}
		}
		if check != nil {
			if err := check(cmd); err != nil {
				return err
			}
		}
		v, err := withTenants(cmd.Context(), a, func(ctx context.Context, pool *pgxpool.Pool) (T, error) {
			return call(ctx, pool, name)
		})
		if err != nil {
			return err
		}
		return out(v)
	})
}

// tenantChange is what the flags of tenant set change, or a usage error
// naming what is wrong with them.
func tenantChange(cmd *cobra.Command, weight int, rate, quota string) (store.TenantChange, error) {
	f := cmd.Flags()
	var c store.TenantChange
	var err error
	if f.Changed("weight") {
		if weight < 1 || weight > 1000 {
			return c, usagef("--weight %d: want 1 to 1000", weight)
		}
		c.Weight = &weight
	}
	if c.SetRate = f.Changed("rate"); c.SetRate {
		if c.Rate, err = parseTenantRate(rate); err != nil {
			return c, usageError{err}
		}
	}
	if c.SetQuotas = f.Changed("quota"); c.SetQuotas {
		if c.QuotaDay, c.QuotaMonth, err = parseTenantQuotas(quota); err != nil {
			return c, usageError{err}
		}
	}
	if c.Weight == nil && !c.SetRate && !c.SetQuotas {
		return c, usagef("nothing to set: give --weight, --rate or --quota (see sendonce tenant set --help)")
	}
	return c, nil
}

// tenantArg accepts exactly one argument, the tenant's name.
func tenantArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("want one tenant's name (or default), as in: sendonce tenant %s acme", cmd.Name())
	}
	return nil
}

// withTenants makes one call over a connection of its own to a database
// with this build's migrations (sendonce_tenant is migration 00031's),
// then closes it.
func withTenants[T any](ctx context.Context, a *app, call func(context.Context, *pgxpool.Pool) (T, error)) (T, error) {
	var zero T
	pool, err := a.connectMigrated(ctx, 0)
	if err != nil {
		return zero, err
	}
	defer pool.Close()
	return call(ctx, pool)
}

// parseTenantRate parses --rate: one rate, as worker.ParseRateLimits reads
// it ("5/s", "600/m", "36000/h"), in requests a second, or none (nil).
func parseTenantRate(s string) (*float64, error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	limits, err := worker.ParseRateLimits(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("--rate: %w", err)
	case len(limits) != 1:
		return nil, fmt.Errorf("--rate %q: give one rate, such as 5/s (a tenant has one)", s)
	case limits[0].IsQuota():
		return nil, fmt.Errorf("--rate %s is a quota (per day or month): give it as --quota %s", limits[0], limits[0])
	}
	r := float64(limits[0].Count) / limits[0].Per.Seconds()
	if r > 1_000_000 {
		return nil, fmt.Errorf("--rate %s: at most 1000000/s", limits[0])
	}
	return &r, nil
}

// parseTenantQuotas parses --quota: a quota per day, per month, or one of
// each, as worker.ParseRateLimits reads them ("10000/d,300000/mo"), or
// none (nil, nil).
func parseTenantQuotas(s string) (day, month *int64, _ error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil, nil
	}
	limits, err := worker.ParseRateLimits(s)
	if err != nil {
		return nil, nil, fmt.Errorf("--quota: %w", err)
	}
	for _, l := range limits {
		n := int64(l.Count)
		p := &day
		if l.Per == worker.Month {
			p = &month
		}
		switch {
		case !l.IsQuota():
			return nil, nil, fmt.Errorf("--quota %s is a rate (per second, minute or hour): give it as --rate %s", l, l)
		case *p != nil:
			return nil, nil, fmt.Errorf("--quota %q: two quotas per %s: give one", s, map[bool]string{true: "month", false: "day"}[l.Per == worker.Month])
		}
		*p = &n
	}
	return day, month, nil
}
