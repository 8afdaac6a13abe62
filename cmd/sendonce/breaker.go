package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sendonce/sendonce/outbox"
)

// breakerFlags are the flags of a run's bounce-rate breaker, on
// `enqueue --run` and `run breaker`.
type breakerFlags struct {
	bounce, complaint string
	minOutcomes       int
	off               bool
}

func (b *breakerFlags) add(f *pflag.FlagSet, what string) {
	f.StringVar(&b.bounce, "bounce-threshold", "", what+"hard-bounce rate that pauses the run, as 5% or 0.05 (default 5%)")
	f.StringVar(&b.complaint, "complaint-threshold", "", what+"complaint rate that pauses the run, as 0.1% or 0.001 (default 0.1%)")
	f.IntVar(&b.minOutcomes, "min-outcomes", 0, what+"known outcomes (delivered, bounced, complained) before the breaker judges (default 100)")
	f.BoolVar(&b.off, "no-breaker", false, what+"no breaker: the run is never paused on its bounce or complaint rate")
}

// set reports whether any of the flags was given.
func (b *breakerFlags) set() bool {
	return b.bounce != "" || b.complaint != "" || b.minOutcomes != 0 || b.off
}

// breaker makes the flags a Breaker, the flags not given taken from base.
func (b *breakerFlags) breaker(base outbox.Breaker) (outbox.Breaker, error) {
	out := base
	out.Off = b.off
	var err error
	if b.bounce != "" {
		if out.BounceRate, err = parseRate("--bounce-threshold", b.bounce); err != nil {
			return out, err
		}
	}
	if b.complaint != "" {
		if out.ComplaintRate, err = parseRate("--complaint-threshold", b.complaint); err != nil {
			return out, err
		}
	}
	if b.minOutcomes < 0 {
		return out, usagef("--min-outcomes %d: want 1 or more", b.minOutcomes)
	}
	if b.minOutcomes > 0 {
		out.MinOutcomes = b.minOutcomes
	}
	return out, nil
}

// parseRate reads "5%" or "0.05" as 0.05.
func parseRate(flag, s string) (float64, error) {
	v, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	r, err := strconv.ParseFloat(v, 64)
	if pct {
		r /= 100
	}
	if err != nil || !(r > 0 && r <= 1) {
		return 0, usagef("%s %q: want a rate above 0 and up to 100%%, as 5%% or 0.05", flag, s)
	}
	return r, nil
}

// pct writes a rate as a percentage: 0.05 as 5%, 0.001 as 0.1%.
func pct(r float64) string {
	return strconv.FormatFloat(r*100, 'f', -1, 64) + "%"
}

// runBreakerCommand declares `sendonce run breaker KEY`.
func (a *app) runBreakerCommand() *cobra.Command {
	var flags breakerFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "breaker KEY",
		Short: "Change a run's bounce-rate breaker (it pauses the run on hard bounces or complaints)",
		Long: `breaker changes the thresholds of a run's bounce-rate breaker; the flags not
given keep their values. It does not resume a run the breaker paused: run resume
does, and a resume after a change of the thresholds is not warned about.`,
		Example: `  sendonce run breaker digest:2026-W49 --bounce-threshold 8% --min-outcomes 200
  sendonce run breaker billing:2026-12 --no-breaker`,
		Args: runKeyArg,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if !flags.set() {
				return usagef("give a threshold to change: --bounce-threshold, --complaint-threshold, --min-outcomes or --no-breaker")
			}
			st, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (*outbox.RunStatus, error) {
				cur, err := ob.RunStatus(ctx, args[0])
				if err != nil {
					return nil, err
				}
				base := outbox.Breaker{MinOutcomes: cur.Breaker.MinOutcomes}
				if !cur.Breaker.Off {
					base.BounceRate, base.ComplaintRate = cur.Breaker.BounceRate, cur.Breaker.ComplaintRate
				}
				b, err := flags.breaker(base)
				if err != nil {
					return nil, err
				}
				return ob.SetRunBreaker(ctx, args[0], b)
			})
			if _, ok := err.(usageError); ok {
				return err
			}
			if err != nil {
				return noSuch("run", args[0], err)
			}
			if asJSON {
				return printJSON(a.stdout, st)
			}
			fmt.Fprintf(a.stdout, "changed the breaker of run %s\n", st.Key)
			printRun(a.stdout, st)
			return nil
		}),
	}
	flags.add(cmd.Flags(), "the ")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

// printBreaker writes a run's breaker, for printRun.
func printBreaker(w io.Writer, r *outbox.RunStatus) {
	b := r.Breaker
	if b == nil {
		return
	}
	if b.Off {
		fmt.Fprintf(w, "breaker:\toff\n")
	} else {
		fmt.Fprintf(w, "breaker:\tpauses at %s hard bounces or %s complaints, after %d known outcomes\n",
			pct(b.BounceRate), pct(b.ComplaintRate), b.MinOutcomes)
	}
	fmt.Fprintf(w, "  known outcomes:\t%d (%d bounced, %d complained)\n", b.Known, b.Bounced, b.Complained)
	switch {
	case b.Reason != "" && r.State == outbox.RunPaused:
		fmt.Fprintf(w, "  paused by the breaker:\t%s\n", b.Reason)
	case b.TrippedAt != nil:
		fmt.Fprintf(w, "  last tripped:\t%s (%d bounced, %d complained of %d known outcomes); resumed since\n",
			stamp(*b.TrippedAt), b.TripBounced, b.TripComplained, b.TripKnown)
	}
}
