package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/migrations"
)

// migrateCommand declares `sendonce migrate`. Its cobra.Command literal is
// alike in shape to demo's on purpose: each command declares its own help,
// and they share no logic.
func (a *app) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and sendonce's pending migrations to the database",
		Long: `migrate applies River's migrations and then sendonce's to the database, each only
if not already applied, under an advisory lock, so several processes starting
at once migrate one at a time. Running it again is a no-op that prints
"already up to date". "sendonce work" refuses to start until it has run.
It works directly and through a pooler such as PgBouncer, in session or
transaction mode, with nothing set: behind a pooler its lock is held by a
transaction of its own, and it needs two server connections at once.`,
		Example: `  sendonce migrate --database-url postgres://app@localhost/app`,
		Args:    noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connect(cmd.Context(), 0)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := migrations.Up(cmd.Context(), pool)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			if !res.Applied() {
				fmt.Fprintln(a.stdout, "already up to date")
				return nil
			}
			var parts []string
			if len(res.River) > 0 {
				parts = append(parts, "River migrations "+joinInts(res.River))
			}
			if len(res.Sendonce) > 0 {
				parts = append(parts, "sendonce migrations "+versionRanges(res.Sendonce))
			}
			fmt.Fprintf(a.stdout, "applied %s\n", strings.Join(parts, ", "))
			return nil
		}),
	}
}

func joinInts[T int | int64](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " ")
}

// versionRanges writes sendonce's versions applied as runs ("1-11, 13-20,
// 22-26"), and says of the numbers they skip that were never used
// (migrations.RetiredVersions) that nothing is missing: a list that went
// 11, 13 with no word read as a migration lost.
func versionRanges(vs []int64) string {
	var runs, skipped []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if j > i {
			runs = append(runs, fmt.Sprintf("%d-%d", vs[i], vs[j]))
		} else {
			runs = append(runs, fmt.Sprint(vs[i]))
		}
		if j+1 < len(vs) {
			for v := vs[j] + 1; v < vs[j+1]; v++ {
				if slices.Contains(migrations.RetiredVersions, v) {
					skipped = append(skipped, fmt.Sprint(v))
				}
			}
		}
		i = j + 1
	}
	s := strings.Join(runs, ", ")
	switch len(skipped) {
	case 0:
	case 1:
		s += fmt.Sprintf(" (no %s: a number retired, never used; nothing is missing)", skipped[0])
	default:
		s += fmt.Sprintf(" (no %s or %s: numbers retired, never used; nothing is missing)",
			strings.Join(skipped[:len(skipped)-1], ", "), skipped[len(skipped)-1])
	}
	return s
}
