package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/outbox"
)

// invoicesEmailed is the status hook of the hook's drain: what an invoice
// application does, one UPDATE of its table for all the intents the
// recording statement sent.
func invoicesEmailed(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
	keys := make([]string, 0, len(statuses))
	for _, s := range statuses {
		if s.Transition == outbox.TransitionSent {
			keys = append(keys, s.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE `+HookTable+` SET emailed_at = now(), emailed = emailed + 1 WHERE key = ANY($1)`, keys)
	return err
}

// hookTable makes HookTable afresh with a row for each intent, not yet
// emailed.
func (e *Env) hookTable(ctx context.Context, intents []outbox.Intent) error {
	keys := make([]string, len(intents))
	for i, in := range intents {
		keys[i] = in.Key
	}
	if _, err := e.Admin.Exec(ctx, `DROP TABLE IF EXISTS `+HookTable); err != nil {
		return fmt.Errorf("bench: drop %s: %w", HookTable, err)
	}
	if _, err := e.Admin.Exec(ctx, `CREATE TABLE `+HookTable+` (key text PRIMARY KEY, emailed_at timestamptz, emailed int NOT NULL DEFAULT 0)`); err != nil {
		return fmt.Errorf("bench: create %s: %w", HookTable, err)
	}
	if _, err := e.Admin.Exec(ctx, `INSERT INTO `+HookTable+` (key) SELECT unnest($1::text[])`, keys); err != nil {
		return fmt.Errorf("bench: fill %s: %w", HookTable, err)
	}
	_, err := e.Admin.Exec(ctx, `VACUUM ANALYZE `+HookTable)
	return err
}

// checkHookTable fails unless each of the n rows of HookTable was
// updated once by the hook.
func (e *Env) checkHookTable(ctx context.Context, n int) error {
	var once, rows int
	if err := e.Admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE emailed = 1 AND emailed_at IS NOT NULL), count(*) FROM `+HookTable).Scan(&once, &rows); err != nil {
		return fmt.Errorf("bench: read %s: %w", HookTable, err)
	}
	if once != n || rows != n {
		return fmt.Errorf("bench: the status hook updated %d of %d rows of %s once, want all %d", once, rows, HookTable, n)
	}
	return nil
}

// readStatements is the benchmark database's statements so far
// (pg_stat_statements' calls), -1 without pg_stat_statements.
func (e *Env) readStatements(ctx context.Context) int64 {
	var n int64
	if err := e.Admin.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// readCommits is the benchmark database's committed transactions so far,
// as reported (a backend reports its own at least every second while
// busy, and as it exits); the admin connection's are flushed first.
func (e *Env) readCommits(ctx context.Context) int64 {
	var n int64
	_, _ = e.Admin.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	if err := e.Admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return -1
	}
	return n
}
