package bench

import (
	"context"
	"fmt"
	"strings"
)

// statements is an opt-in diagnostic: when the server has
// pg_stat_statements loaded (shared_preload_libraries), resetStatements
// clears its counters and topStatements renders the statements of the
// benchmark database that took the most time since, with calls per unit
// of work, so a row's database CPU can be traced to its statements. On a
// server without it both do nothing.
func (e *Env) resetStatements(ctx context.Context) bool {
	if _, err := e.Admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false
	}
	_, err := e.Admin.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err == nil
}

// topStatements renders the n statements of the benchmark database with
// the most total execution time since resetStatements: total ms, calls
// per unit (per intent, say), mean µs (and of it, planning, and how many plans were made) and the
// statement's first words.
func (e *Env) topStatements(ctx context.Context, n int, units float64) string {
	rows, err := e.Admin.Query(ctx, `SELECT total_exec_time + total_plan_time, total_plan_time, calls, plans, query FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		return "pg_stat_statements not readable: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	var total float64
	var calls int64
	for rows.Next() {
		var ms, plan float64
		var c, plans int64
		var q string
		if err := rows.Scan(&ms, &plan, &c, &plans, &q); err != nil {
			return err.Error()
		}
		total += ms
		calls += c
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 140 {
			q = q[:140] + "…"
		}
		fmt.Fprintf(&b, "\n  %9.1f ms %8d calls %6.2f/unit %8.1f µs (planning %6.1f, %d plans)  %s", ms, c, float64(c)/units, 1000*ms/float64(max(c, 1)), 1000*plan/float64(max(c, 1)), plans, q)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	// Every statement, for the calls the top ones leave out: each costs
	// its protocol round (tens of µs of the backend's CPU) whatever its
	// execution time, so a cheap statement made often counts.
	var allMS float64
	var allCalls int64
	if err := e.Admin.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time + total_plan_time), 0), coalesce(sum(calls), 0)::int8 FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&allMS, &allCalls); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("top %d statements: %.1f ms, %d calls (%.2f per unit); all statements: %.1f ms, %d calls (%.2f per unit):%s",
		n, total, calls, float64(calls)/units, allMS, allCalls, float64(allCalls)/units, b.String())
}
