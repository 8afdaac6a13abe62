// Package planguard runs reads that find outbox rows by an unsettled state
// under plans that never scan a table whole, whatever the statistics say.
// The outbox's counts and the outbox page use it; it is not part of the
// public API, which only users' calls make up.
package planguard

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Run runs fn in a read-only transaction whose plans do not scan tables
// whole (enable_seqscan off, and so jit off), for reads that find rows by
// an unsettled state. Those rows are few and a partial index holds them,
// but with statistics taken while most of the table was unsettled (a
// billing run just enqueued, and no ANALYZE since it was sent) the planner
// chose a sequential scan of the whole outbox, a cost that grows with
// history.
func Run(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// jit off: a plan priced with enable_seqscan off passes
		// jit_above_cost, and compiling it took 80 ms of a read of 1.
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL jit = off`); err != nil {
			return err
		}
		return fn(tx)
	})
}
