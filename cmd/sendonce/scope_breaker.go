package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/outbox"
)

const breakerLong = `breaker sets and resumes the bounce-rate breaker of a topic's or a tenant's bulk
sending (the members of its runs). Past its hard-bounce or complaint rate (5%,
0.1% by default) over its known outcomes (1,000 by default: ten times a run's
own minimum), every active run of the topic or tenant with members left to send
pauses itself, and a run made while it holds starts paused; transactional
intents (no run) are never paused, nor counted. A run's own breaker is
sendonce run breaker.

SCOPE is topic:NAME or tenant:NAME (tenant:default for the default tenant), or
topic:* and tenant:* for the defaults of every topic or tenant without settings
of its own.

  set SCOPE     changes the thresholds (the flags not given take their defaults)
  resume SCOPE  clears its trip and resumes the runs it paused; it then judges
                only the outcomes after the resume`

// breakerScope reads SCOPE: "topic:news", "tenant:acme", "tenant:default",
// "topic:*".
func breakerScope(arg string) (scope, name string, err error) {
	scope, name, ok := strings.Cut(arg, ":")
	if !ok || (scope != outbox.BreakerTopic && scope != outbox.BreakerTenant) {
		return "", "", usagef("%q: want topic:NAME or tenant:NAME (tenant:default, topic:*, tenant:*)", arg)
	}
	if scope == outbox.BreakerTenant && name == "default" {
		name = ""
	}
	return scope, name, nil
}

// scopeBreakerCommand declares `sendonce breaker`.
func (a *app) scopeBreakerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "breaker",
		Short: "Set or resume a topic's or a tenant's bounce-rate breaker",
		Long:  breakerLong,
		Example: `  sendonce breaker set topic:news --bounce-threshold 3% --min-outcomes 500
  sendonce breaker set tenant:* --no-breaker
  sendonce breaker resume tenant:acme`,
	}
	var flags breakerFlags
	set := &cobra.Command{
		Use:   "set SCOPE [--bounce-threshold R] [--complaint-threshold R] [--min-outcomes N] [--no-breaker]",
		Short: "Change a topic's or a tenant's breaker (the flags not given take their defaults)",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			scope, name, err := breakerScope(args[0])
			if err != nil {
				return err
			}
			b, err := flags.breaker(outbox.Breaker{})
			if err != nil {
				return err
			}
			_, err = fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (struct{}, error) {
				return struct{}{}, ob.SetBreaker(ctx, scope, name, b)
			})
			if inv := (*outbox.InvalidError)(nil); errors.As(err, &inv) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "set the breaker of %s\n", args[0])
			return nil
		}),
	}
	flags.add(set.Flags(), "the ")
	resume := &cobra.Command{
		Use:   "resume SCOPE",
		Short: "Clear a topic's or a tenant's trip and resume the runs it paused",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			scope, name, err := breakerScope(args[0])
			if err != nil {
				return err
			}
			runs, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) ([]string, error) {
				return ob.ResumeBreaker(ctx, scope, name)
			})
			if inv := (*outbox.InvalidError)(nil); errors.As(err, &inv) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "resumed the breaker of %s and %d run(s) it paused", args[0], len(runs))
			if len(runs) > 0 {
				fmt.Fprintf(a.stdout, ": %s", strings.Join(runs, ", "))
			}
			fmt.Fprintln(a.stdout)
			return nil
		}),
	}
	cmd.AddCommand(set, resume)
	return cmd
}

// breakersCommand declares `sendonce breakers`.
func (a *app) breakersCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "breakers",
		Short: "List the topics' and tenants' bounce-rate breakers",
		Long: `breakers lists the bounce-rate breakers of the topics and tenants with outcomes
counted, settings or a trip: their thresholds, the outcomes they judge (since
their last resume), and what trip holds their runs paused.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			bs, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) ([]*outbox.ScopeBreaker, error) {
				return ob.Breakers(ctx, "", "")
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, bs)
			}
			printScopeBreakers(a.stdout, bs)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the breakers as JSON")
	return cmd
}

// printScopeBreakers writes the breakers as a table.
func printScopeBreakers(w io.Writer, bs []*outbox.ScopeBreaker) {
	if len(bs) == 0 {
		fmt.Fprintln(w, "no topic or tenant has outcomes counted, settings or a trip")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tTHRESHOLDS\tKNOWN\tBOUNCED\tCOMPLAINED\tTRIPPED")
	for _, b := range bs {
		name := b.Name
		if b.Scope == outbox.BreakerTenant && name == "" {
			name = "default"
		}
		thresholds := "off"
		if !b.Off {
			thresholds = fmt.Sprintf("%s / %s after %d", pct(b.BounceRate), pct(b.ComplaintRate), b.MinOutcomes)
		}
		switch {
		case b.Own || b.Name == outbox.BreakerDefaults:
		case b.Defaults:
			thresholds += " (" + b.Scope + ":*)"
		default:
			thresholds += " (default)"
		}
		tripped := "-"
		if b.TrippedAt != nil {
			tripped = b.Reason
		}
		fmt.Fprintf(tw, "%s:%s\t%s\t%d\t%d\t%d\t%s\n", b.Scope, name, thresholds, b.Known, b.Bounced, b.Complained, tripped)
	}
	tw.Flush()
}
