package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/outbox"
)

const suppressionLong = `suppression manages the suppression list: addresses that are not mailed
again. The delivery webhooks (sendonce work --webhook-addr) put hard-bounced
and complaining addresses on it, and keep it in step with the API's own
list (email.suppressed, suppression.added, suppression.removed).

A worker looks an intent's recipients up when it first claims it, before any
API call: an intent with no "to" recipient left is parked as suppressed, one
partly suppressed is sent to the others (sendonce work --partly-suppressed).
An intent parked as suppressed goes again with sendonce retry, once its
addresses are off the list.

  list [--reason R]          the list in address order
  list --topic T             the addresses unsubscribed from topic T
  add ADDRESS...             suppresses addresses by hand (reason manual)
  add ADDRESS... --topic T   unsubscribes addresses from topic T by hand
  remove ADDRESS...          takes addresses off the list
  remove ADDRESS... --topic T  resubscribes addresses to topic T

An unsubscribe (the one-click links of intents with a topic, or --topic)
stops only that topic's intents; a bounce or a complaint stops them all.`

// suppressionCommand is the suppression command and its list, add and
// remove subcommands. It is long because it declares the three together
// with their flags, as runCommand and scheduleCommand do, so that one
// screen shows the whole command.
func (a *app) suppressionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "suppression",
		Short: "List, add and remove suppressed addresses",
		Long:  suppressionLong,
		Args:  noArgs,
	}
	var asJSON bool
	var reason, after, source, topic string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List the suppressed addresses",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if topic != "" {
				return a.listUnsubscribes(cmd.Context(), topic, after, limit, asJSON)
			}
			all, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) ([]outbox.Suppression, error) {
				return ob.Suppressions(ctx, &outbox.SuppressionParams{Reason: outbox.SuppressionReason(reason), After: after, Limit: limit})
			})
			if err != nil {
				return err
			}
			return printList(a.stdout, asJSON, all, "ADDRESS\tREASON\tSINCE\tSOURCE", func(s outbox.Suppression) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s", s.Address, s.Reason, stamp(s.CreatedAt), s.Source)
			})
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	list.Flags().StringVar(&reason, "reason", "", "only this reason: bounced, complained, api or manual")
	list.Flags().StringVar(&after, "after", "", "page: only addresses after this one")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many addresses (up to 10000)")
	list.Flags().StringVar(&topic, "topic", "", "list the addresses unsubscribed from this topic instead")

	addresses := func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("want one or more addresses")
		}
		return nil
	}
	add := &cobra.Command{
		Use:   "add ADDRESS...",
		Short: "Suppress addresses by hand",
		Args:  addresses,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			n, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (int, error) {
				if topic != "" {
					return eachAddress(ctx, args, func(addr string) (bool, error) { return ob.Unsubscribe(ctx, addr, topic, source) })
				}
				return ob.Suppress(ctx, args, source)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "suppressed %d of %d addresses (the others were on the list already)\n", n, len(args))
			return nil
		}),
	}
	add.Flags().StringVar(&source, "source", "sendonce suppression add", "who or why, stored with each address")
	add.Flags().StringVar(&topic, "topic", "", "unsubscribe the addresses from this topic only")
	remove := &cobra.Command{
		Use:   "remove ADDRESS...",
		Short: "Take addresses off the suppression list",
		Args:  addresses,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			n, err := fromOutbox(cmd.Context(), a, "", func(ob *outbox.Outbox, ctx context.Context) (int, error) {
				if topic != "" {
					return eachAddress(ctx, args, func(addr string) (bool, error) {
						return ob.Resubscribe(ctx, addr, topic, "sendonce suppression remove")
					})
				}
				return ob.Unsuppress(ctx, args)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "removed %d of %d addresses (the others were not on the list)\n", n, len(args))
			return nil
		}),
	}
	remove.Flags().StringVar(&topic, "topic", "", "resubscribe the addresses to this topic (take back their unsubscribe)")
	cmd.AddCommand(list, add, remove)
	return cmd
}

// eachAddress applies one change per address, counting those it changed.
func eachAddress(ctx context.Context, addrs []string, change func(string) (bool, error)) (int, error) {
	n := 0
	for _, addr := range addrs {
		ok, err := change(addr)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// listUnsubscribes prints the addresses unsubscribed from topic.
func (a *app) listUnsubscribes(ctx context.Context, topic, after string, limit int, asJSON bool) error {
	all, err := fromOutbox(ctx, a, "", func(ob *outbox.Outbox, ctx context.Context) ([]outbox.Unsubscription, error) {
		return ob.Unsubscriptions(ctx, &outbox.UnsubscriptionParams{Topic: topic, After: after, Limit: limit})
	})
	if err != nil {
		return err
	}
	return printList(a.stdout, asJSON, all, "ADDRESS\tTOPIC\tSINCE\tSOURCE", func(u outbox.Unsubscription) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s", u.Address, u.Topic, stamp(u.CreatedAt), u.Source)
	})
}
