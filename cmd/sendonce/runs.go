package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/internal/base/cronspec"
	"github.com/sendonce/sendonce/outbox"
)

const runLong = `run watches and steers one run: a billing run, a campaign, one occurrence of a
schedule. A run's members are the intents enqueued with it (sendonce enqueue
--run, outbox.EnqueueRun, or SQL with run_key).

  show KEY              members by state, the pace of the last minute, the time left at it
  pause KEY             no member is claimed until resume; sends in flight finish
  resume KEY            members wait no longer
  cancel KEY            cancels every member whose send has not started, at once;
                        members attempted already are left as they are, and counted;
                        a run whose members are all settled (done) is refused
  reschedule KEY TIME   holds the members whose send has not started until TIME
                        (RFC 3339, ahead: a time in the past is refused), or
                        lets them go at once (TIME "now")
  breaker KEY           changes the run's bounce-rate breaker: past its hard-bounce
                        or complaint rate (5%, 0.1% by default) over 100 known
                        outcomes, the run pauses itself, and says why

A run's state is active, paused or canceled, or done: active, with members,
every one of them settled (sent, failed, canceled or suppressed). The outbox
page shows the same state.`

func (a *app) runsCommand() *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs, newest first, with their progress",
		Long: `runs lists the runs (billing runs, campaigns, occurrences of schedules), newest
first: their state and their members by state.`,
		Example: `  sendonce runs
  sendonce runs --limit 5 --json`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usagef("--limit %d: want 1 to 1000", limit)
			}
			runs, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) ([]*outbox.RunStatus, error) {
				return ob.Runs(ctx, &outbox.RunListParams{Limit: limit})
			})
			if err != nil {
				return err
			}
			// A TENANT column only when a run has one: a sender for one
			// customer sees the table as it was.
			header, tenants, tripped := "KEY\tSTATE\tMEMBERS\tSENT\tFAILED\tCANCELED\tTO SEND\tCREATED", false, false
			for _, r := range runs {
				tenants = tenants || r.Tenant != ""
				tripped = tripped || breakerReason(r) != ""
			}
			if tenants {
				header += "\tTENANT"
			}
			// A PAUSED BY column only when the breaker holds a run paused.
			if tripped {
				header += "\tPAUSED BY"
			}
			return printList(a.stdout, asJSON, runs, header, func(r *outbox.RunStatus) string {
				line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s", r.Key, r.State, r.Total, r.Counts[outbox.StateSent],
					r.Counts[outbox.StateFailed], r.Counts[outbox.StateCanceled],
					r.Counts[outbox.StatePending]+r.Counts[outbox.StateSending], stamp(r.CreatedAt))
				if tenants {
					line += "\t" + outbox.TenantName(r.Tenant)
				}
				if tripped {
					line += "\t" + breakerReason(r)
				}
				return line
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as a JSON array")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs (1 to 1000)")
	return cmd
}

// runCommand declares `sendonce run` and its five subcommands. It is long
// because it is declarations (help, arguments, flags) of a command tree that
// reads best in one piece; the logic is in outbox.
func (a *app) runCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Show, pause, resume, cancel or reschedule a run",
		Long:  runLong,
		Example: `  sendonce run show billing:2026-12
  sendonce run pause billing:2026-12     # the PDF renderer is broken
  sendonce run resume billing:2026-12
  sendonce run reschedule digest:2026-W49 2026-12-08T09:00:00+01:00
  sendonce run cancel billing:2026-12 --json`,
	}
	var asJSON bool
	status := func(use, short string, call func(*outbox.Outbox, context.Context, string) (*outbox.RunStatus, error), verb string) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " KEY",
			Short: short,
			Args:  runKeyArg,
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				st, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (*outbox.RunStatus, error) {
					return call(ob, ctx, args[0])
				})
				if err != nil {
					return noSuch("run", args[0], err)
				}
				if asJSON {
					return printJSON(a.stdout, st)
				}
				if verb != "" {
					fmt.Fprintf(a.stdout, "%s run %s\n", verb, st.Key)
				}
				printRun(a.stdout, st)
				return nil
			}),
		}
		c.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
		return c
	}
	cancel := &cobra.Command{
		Use:   "cancel KEY",
		Short: "Cancel every member whose send has not started, at once",
		Args:  runKeyArg,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			res, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (*outbox.RunCancel, error) {
				return ob.CancelRun(ctx, args[0])
			})
			if err != nil {
				return noSuch("run", args[0], err)
			}
			if asJSON {
				return printJSON(a.stdout, res)
			}
			fmt.Fprintf(a.stdout, "canceled run %s: %d members canceled, %d left as they were (attempted or settled)\n",
				res.Status.Key, res.Canceled, res.Left)
			printRun(a.stdout, res.Status)
			return nil
		}),
	}
	cancel.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	var queue string
	reschedule := &cobra.Command{
		Use:   "reschedule KEY TIME",
		Short: "Hold the members whose send has not started until TIME (RFC 3339, ahead; or now)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("want a run's key and an RFC 3339 time, as in: sendonce run reschedule billing:2026-12 2026-12-08T09:00:00Z")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			at, err := time.Parse(time.RFC3339, args[1])
			if args[1] == "now" {
				at, err = time.Now(), nil
			}
			if err != nil {
				return usagef("%q is not an RFC 3339 time (like 2026-12-08T09:00:00Z) nor now", args[1])
			}
			n, err := fromOutbox(cmd.Context(), a, queue, func(ob *outbox.Outbox, ctx context.Context) (int64, error) {
				return ob.RescheduleRun(ctx, args[0], at)
			})
			var inv *outbox.InvalidError
			if errors.As(err, &inv) {
				return usageError{err}
			}
			if err != nil {
				return noSuch("run", args[0], err)
			}
			if asJSON {
				return printJSON(a.stdout, map[string]any{"key": args[0], "sendAt": at, "rescheduled": n})
			}
			if args[1] == "now" {
				fmt.Fprintf(a.stdout, "rescheduled run %s: %d members due now\n", args[0], n)
				return nil
			}
			fmt.Fprintf(a.stdout, "rescheduled run %s: %d members held until %s\n", args[0], n, stamp(at))
			return nil
		}),
	}
	reschedule.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	reschedule.Flags().StringVar(&queue, "queue", outbox.DefaultQueue, "River queue of the members' new jobs")
	bindEnv(reschedule.Flags(), "queue", "SENDONCE_QUEUE")
	resume := status("resume", "Resume a paused run", (*outbox.Outbox).ResumeRun, "resumed")
	resume.Flags().StringVar(&queue, "queue", outbox.DefaultQueue, "River queue of the members' new jobs")
	bindEnv(resume.Flags(), "queue", "SENDONCE_QUEUE")
	cmd.AddCommand(
		status("show", "Show a run: members by state, pace, time left", (*outbox.Outbox).RunStatus, ""),
		status("pause", "Pause a run: no member is claimed until resume", (*outbox.Outbox).PauseRun, "paused"),
		resume, cancel, reschedule, a.runBreakerCommand(),
	)
	return cmd
}

func runKeyArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("want one run key, as in: sendonce run %s billing:2026-12", cmd.Name())
	}
	return nil
}

// printRun writes a run field by field.
func printRun(w io.Writer, r *outbox.RunStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", r.Key)
	fmt.Fprintf(tw, "state:\t%s\n", r.State)
	if r.SendAt != nil {
		fmt.Fprintf(tw, "send at:\t%s\n", stamp(*r.SendAt))
	}
	if r.Schedule != "" {
		fmt.Fprintf(tw, "schedule:\t%s\n", r.Schedule)
	}
	if r.Tenant != "" {
		fmt.Fprintf(tw, "tenant:\t%s\n", r.Tenant)
	}
	fmt.Fprintf(tw, "members:\t%d\n", r.Total)
	for _, s := range outbox.States {
		fmt.Fprintf(tw, "  %s:\t%d\n", s, r.Counts[s])
	}
	for _, d := range outbox.DeliveryStatuses {
		if n := r.Deliveries[d]; n > 0 {
			fmt.Fprintf(tw, "  delivery %s:\t%d\n", d, n)
		}
	}
	printBreaker(tw, r)
	fmt.Fprintf(tw, "sent in the last minute:\t%d\n", r.SentLastMinute)
	switch left := r.Left(); {
	case r.Settled():
		fmt.Fprintf(tw, "time left:\tnone, done\n")
	case r.Total == 0:
		fmt.Fprintf(tw, "time left:\tnone: no members yet\n")
	case r.Done():
		fmt.Fprintf(tw, "time left:\tnone, nothing left to send\n")
	case r.State == outbox.RunPaused:
		fmt.Fprintf(tw, "time left:\tpaused: %d members wait until sendonce run resume %s\n",
			r.Counts[outbox.StatePending]+r.Counts[outbox.StateSending], r.Key)
	case r.SendAt != nil && r.SendAt.After(time.Now()):
		fmt.Fprintf(tw, "time left:\tnot started: the run's send time is %s\n", stamp(*r.SendAt))
	case left > 0:
		fmt.Fprintf(tw, "time left:\tabout %s at that pace\n", left.Round(time.Second))
	default:
		fmt.Fprintf(tw, "time left:\tunknown: nothing sent in the last minute\n")
	}
	fmt.Fprintf(tw, "created:\t%s\n", stamp(r.CreatedAt))
	tw.Flush()
}

// scheduleCommand declares `sendonce schedule` and its add, list and remove
// subcommands. It is long because it is declarations (help, arguments,
// flags) of a command tree that reads best in one piece; the logic is in
// outbox.
func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Add, list or remove recurring runs",
		Long:  scheduleLong,
		Example: `  sendonce schedule add digest --spec "0 8 * * MON Europe/Berlin" --sql-file digest.sql
  sendonce schedule add invoices --spec "0 6 1 * *" --producer monthly-invoices
  sendonce schedule list
  sendonce schedule remove digest`,
	}
	var spec, sqlFile, producer, missed, topic, tenant string
	var asJSON bool
	add := &cobra.Command{
		Use:   "add NAME --spec SPEC (--sql-file F | --producer NAME)",
		Short: "Add or replace a schedule",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one schedule name, as in: sendonce schedule add digest --spec '0 8 * * MON Europe/Berlin' --sql-file digest.sql")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			s := outbox.Schedule{Name: args[0], Spec: spec, Producer: producer, Missed: outbox.Missed(missed), Topic: topic,
				Tenant: tenant}
			if spec == "" {
				return usagef("--spec is required, as in --spec '0 8 * * MON Europe/Berlin'")
			}
			if (sqlFile == "") == (producer == "") {
				return usagef("give --sql-file F or --producer NAME, one of the two")
			}
			if sqlFile != "" {
				b, err := os.ReadFile(sqlFile)
				if err != nil {
					return fmt.Errorf("cannot read the statement: %w", err)
				}
				s.Statement = string(b)
			}
			if _, err := cronspec.Parse(spec); err != nil {
				return usagef("--spec: %v", err)
			}
			saved, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (*outbox.Schedule, error) {
				return ob.SaveSchedule(ctx, s)
			})
			var inv *outbox.InvalidError
			if errors.As(err, &inv) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, saved)
			}
			fmt.Fprintf(a.stdout, "saved schedule %s: next occurrence %s\n", saved.Name, stamp(saved.NextAt))
			return nil
		}),
	}
	add.Flags().StringVar(&spec, "spec", "", "when: cron fields and an optional time zone (required)")
	add.Flags().StringVar(&sqlFile, "sql-file", "", "a SQL statement that inserts the members ($1 = run key, $2 = occurrence)")
	add.Flags().StringVar(&producer, "producer", "", "the name of a Go producer registered with the workers")
	add.Flags().StringVar(&missed, "missed", string(outbox.MissedLate), "occurrences missed while no worker ran: late or skip")
	add.Flags().StringVar(&topic, "topic", "", "the topic of the runs it creates and their members (one-click unsubscribe; see docs/webhooks.md)")
	add.Flags().StringVar(&tenant, "tenant", "", "the tenant of the runs it creates and their members; none: the default tenant")
	add.Flags().BoolVar(&asJSON, "json", false, "print the schedule as JSON")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the schedules",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			all, err := fromOutbox(cmd.Context(), a, "", (*outbox.Outbox).Schedules)
			if err != nil {
				return err
			}
			return printList(a.stdout, asJSON, all, "NAME\tSPEC\tSOURCE\tMISSED\tNEXT\tLAST RUN\tFAILING", func(s *outbox.Schedule) string {
				source := "sql"
				if s.Producer != "" {
					source = "producer " + s.Producer
				}
				failing := ""
				if s.Failures > 0 && s.RetryAt != nil {
					failing = fmt.Sprintf("%d× (next try %s): %s", s.Failures, stamp(*s.RetryAt), clip(s.LastError, 100))
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", s.Name, s.Spec, source, s.Missed, stamp(s.NextAt), s.LastRun, failing)
			})
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the schedules as JSON")
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a schedule (its runs stay)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one schedule name")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			_, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (struct{}, error) {
				return struct{}{}, ob.DeleteSchedule(ctx, args[0])
			})
			if err != nil {
				return noSuch("schedule", args[0], err)
			}
			fmt.Fprintf(a.stdout, "removed schedule %s\n", args[0])
			return nil
		}),
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

// runLine is one line of the NDJSON that `sendonce enqueue --run` reads.
type runLine struct {
	Key        string          `json:"key"`
	Kind       string          `json:"kind"`
	TemplateID string          `json:"templateId"`
	SendAt     *time.Time      `json:"sendAt"`
	Payload    json.RawMessage `json:"payload"`
	Topic      string          `json:"topic"`
	Tenant     string          `json:"tenant"`
}

// readRunIntents reads NDJSON members: one JSON object per line with key,
// payload and optionally kind, templateId, sendAt, topic and tenant. Every line is checked
// before anything is written; an error names the line.
func readRunIntents(r io.Reader, source string) ([]outbox.Intent, error) {
	var out []outbox.Intent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), outbox.MaxPayloadBytes+64*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var l runLine
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("%s line %d: want a JSON object with key, payload and optionally kind, templateId, sendAt: %v", source, n, err)
		}
		if l.Key == "" {
			return nil, fmt.Errorf("%s line %d: no \"key\": derive each member's key from the cause of its send", source, n)
		}
		in := outbox.Intent{Key: l.Key, Kind: outbox.Kind(l.Kind), TemplateID: l.TemplateID, Payload: []byte(l.Payload), Topic: l.Topic,
			Tenant: l.Tenant}
		if l.SendAt != nil {
			in.SendAt = *l.SendAt
		}
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("%s line %d: %s", source, n, strings.TrimPrefix(err.Error(), "sendonce: "))
		}
		out = append(out, in)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s line %d: %w", source, n+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no members: want one JSON object per line", source)
	}
	return out, nil
}

// noSuch words outbox.ErrNotFound for what the command names (a run, a
// schedule): "no run "billing:2026-12"", not the intents' "no intent with
// key". Other errors pass unchanged.
func noSuch(what, name string, err error) error {
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no %s %q", what, name)
	}
	return err
}

// breakerReason is "breaker: REASON" for a run the breaker holds paused,
// "" otherwise.
func breakerReason(r *outbox.RunStatus) string {
	if r.State != outbox.RunPaused || r.Breaker == nil || r.Breaker.Reason == "" {
		return ""
	}
	return "breaker: " + r.Breaker.Reason
}
