package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/worker"
)

// retention is a flag value for a retention: a Go duration (90m, 36h) or a
// whole number of days (30d) or years (1y, 365 days); "0" is zero.
type retention time.Duration

func (r *retention) String() string {
	d := time.Duration(*r)
	switch {
	case d == 0:
		return "0"
	case d%(365*24*time.Hour) == 0:
		return fmt.Sprintf("%dy", d/(365*24*time.Hour))
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func (r *retention) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*r = retention(d)
	return nil
}

func (r *retention) Type() string { return "duration" }

func parseRetention(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "y": 365 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 0 || int64(v) > math.MaxInt64/int64(unit) {
				return 0, fmt.Errorf("%q: want a duration such as 30d, 1y or 36h", s)
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration such as 30d, 1y or 36h", s)
	}
	return d, nil
}

const pruneLong = `prune deletes what retention lets go, once, and prints what it deleted:
the settled intents (sent, failed, canceled, suppressed) settled longer than --retain ago
with their delivery events, then the settled batches and done runs left with
no member, unmatched events, and the tombstones and unsubscribe events (the
history; who is unsubscribed stays) older than --retain-keys.

Each pruned intent leaves a tombstone: 16 bytes of its key's hash, 16 of its
payload's, its final state. Enqueueing a pruned key again (with the Go API or
a plain INSERT) is the existing intent when the payload is the same, and a
key-reuse error when it is not: never a second send. Intents whose batch or
run is unsettled, or whose River job may still run, stay.

It deletes in transactions of 1,000 rows, skipping rows others hold, so it
never holds long locks; "sendonce work --retain" runs the same every minute.
While intents are being sent it rests three times as long as each
transaction took, so the sends keep most of the database.`

const pruneExamples = `  sendonce prune --retain 30d
  sendonce prune --retain 0 --retain-keys 2y   # everything settled, tombstones kept two years`

// pruneCommand declares `sendonce prune`.
func (a *app) pruneCommand() *cobra.Command {
	retain := retention(30 * 24 * time.Hour)
	retainKeys := retention(worker.DefaultRetainKeys)
	cmd := &cobra.Command{
		Use:     "prune",
		Short:   "Delete settled intents past retention, keeping their keys' tombstones",
		Long:    pruneLong,
		Example: pruneExamples,
		Args:    noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connectMigrated(cmd.Context(), 0)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := sendstate.Prune(cmd.Context(), pool, sendstate.PruneOptions{
				Retain: time.Duration(retain), RetainKeys: time.Duration(retainKeys)})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "pruned %d intents, %d events, %d batches, %d runs, %d tombstones, %d unsubscribe events\n",
				res.Intents, res.Events, res.Batches, res.Runs, res.Tombstones, res.UnsubscribeEvents)
			if res.Rested > 0 {
				fmt.Fprintf(a.stdout, "rested %s between transactions for the sends in flight\n", res.Rested.Round(time.Millisecond))
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.Var(&retain, "retain", "delete settled intents settled longer ago than this (30d, 36h; 0: all settled)")
	f.Var(&retainKeys, "retain-keys", "keep pruned intents' key tombstones this long (0: for ever)")
	bindEnv(f, "retain", "SENDONCE_RETAIN")
	bindEnv(f, "retain-keys", "SENDONCE_RETAIN_KEYS")
	return cmd
}
