package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/outbox"
)

// This file holds the two commands that change an intent: cancel and
// retry. The commands that only read (status, show, list) are in
// inspect.go.

// cancelCommand declares `sendonce cancel`. Its declaration is alike in
// shape to show's and status's on purpose (a cobra.Command literal and its
// --json flag); the logic they share is in intentRunE.
func (a *app) cancelCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel KEY",
		Short: "Cancel a pending intent nothing of which can have reached the API",
		Long: `cancel cancels a pending intent nothing of which can have reached the API:
no send attempt has been made, or it is retrying after attempts that are
certain to have delivered nothing (the connection was refused or never made,
a DNS failure, a 429), so it is not marked uncertain. An intent enqueued by a
release before the drain has its own River job canceled with it. Any other
intent (being sent, sent, failed, frozen into a batch, or pending after an
attempt that may have reached the API: a timeout, a 5xx, a lost answer) is
refused and left as it was.`,
		Example: `  sendonce cancel welcome:user_17`,
		Args:    keyArg,
		RunE: a.intentRunE(&asJSON, (*outbox.Outbox).Cancel, func(w io.Writer, rec *outbox.Record) {
			fmt.Fprintf(w, "canceled %s\n", summary(rec))
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the canceled intent as JSON")
	return cmd
}

// retryOutput is retry's --json answer.
type retryOutput struct {
	Intent *outbox.Record `json:"intent"`
	// Forced is true when --force was given: an earlier attempt may have
	// reached the API after it forgot the key, and this retry may deliver
	// the intent a second time.
	Forced bool `json:"forced"`
}

func (a *app) retryCommand() *cobra.Command {
	var (
		asJSON bool
		force  bool
		queue  string
		window time.Duration
	)
	cmd := &cobra.Command{
		Use:   "retry KEY",
		Short: "Send a failed intent again, with the same key",
		Long: `retry puts a failed intent back to pending with the same idempotency key, for
the workers' drains to send, with a new budget of attempts and snoozes. Its
replay window still runs from its first attempt.

An intent none of whose attempts can have reached the API (each was answered
with an error, such as a 422 for a bad address) is always retried: fix the
cause, then retry. An uncertain one (a network error, a 5xx or a crash left
an attempt's outcome unknown) is retried while its replay window lasts: if an
attempt did reach the API, the API replays it. After the window, the API may
no longer remember the key and a send could deliver it a second time: retry
refuses, unless --force is given after checking with the recipient. A forced
retry starts a new window, is logged, and is recorded on the intent
(forcedRetryAt).`,
		Example: `  sendonce retry invoice:inv_4192
  sendonce retry --force invoice:inv_4192   # checked: the customer never got it`,
		Args: keyArg,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if queue == "" {
				return usagef("--queue must not be empty")
			}
			if window <= 0 || window > outbox.MaxReplayWindow {
				return usagef("--replay-window %s: want a positive duration of at most %s", window, outbox.MaxReplayWindow)
			}
			rec, err := fromOutbox(cmd.Context(), a, queue, func(ob *outbox.Outbox, ctx context.Context) (*outbox.Record, error) {
				return ob.Retry(ctx, args[0], &outbox.RetryOptions{Force: force, ReplayWindow: window})
			})
			if err != nil {
				return err
			}
			switch {
			case force:
				// Logged where the logs go (JSON off a terminal), for the audit.
				a.logger.Warn("retried with --force: if an earlier attempt reached the API, the intent may be delivered a second time",
					"key", rec.Key, "forced_retry_at", rec.ForcedRetryAt)
			case rec.Uncertain:
				fmt.Fprintf(a.stderr, "sendonce: note: an earlier attempt of %s may have reached the API; "+
					"within its replay window the API replays it rather than deliver it again\n", rec.Key)
			}
			if asJSON {
				return printJSON(a.stdout, retryOutput{Intent: rec, Forced: force})
			}
			fmt.Fprintf(a.stdout, "retried %s\n", summary(rec))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "retry even when the send could be a second delivery (the window has passed)")
	cmd.Flags().DurationVar(&window, "replay-window", outbox.DefaultReplayWindow, "the workers' replay window")
	bindEnv(cmd.Flags(), "replay-window", "SENDONCE_REPLAY_WINDOW")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the intent as JSON")
	cmd.Flags().StringVar(&queue, "queue", outbox.DefaultQueue, "River queue of a batch's new send job (a batch member retried with its batch); the worker must work the same queue")
	bindEnv(cmd.Flags(), "queue", "SENDONCE_QUEUE")
	return cmd
}
