package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/internal/base/store"
)

// Enqueueing through a connection pooler (issue 24). pgx's default mode,
// QueryExecModeCacheStatement, prepares a named statement for each query
// and caches the name on the client connection. A transaction-mode pooler
// (PgBouncer before 1.21, or without max_prepared_statements) gives that
// connection whichever server connection is free at each transaction, one
// that never saw the name (26000: it does not exist) or one where another
// client prepared it (42P05: it already exists). Enqueue in the caller's
// transaction must not depend on how the caller's pool is set, so its
// statements run through producerTx, which asks once per connection
// whether the session it talks to is the one it connected to: PostgreSQL
// tells a client its backend's process id at connect (BackendKeyData), and
// a pooler sends a key of its own instead, since it must route the
// client's cancel requests itself. On a direct connection sendonce's
// statements run in the pool's own mode (named, cached statements: their
// plans are cached, and Enqueue runs about twice as fast as with plans made
// per call, measured by the enqueue benchmarks); behind a pooler, in
// QueryExecModeExec: one round trip with the unnamed statement, nothing
// left behind on the server connection. A session-mode pooler is taken
// for a pooler too, which costs only the plans.

// directKey is where a connection's CustomData holds whether it talks to
// its own backend (true) or through a pooler (false).
const directKey = "sendonce.outbox.direct"

// producerTx is the caller's transaction as sendonce's statements use it:
// every Query, QueryRow and Exec in mode (see above).
type producerTx struct {
	pgx.Tx
	mode pgx.QueryExecMode
	// batches is whether a pgx.Batch, which always runs in the
	// connection's default mode, names no prepared statement that a pooler
	// could lose.
	batches bool
}

// forProducer wraps tx, finding out first, once per connection, whether it
// talks to its backend directly (one query, in tx).
func forProducer(ctx context.Context, tx pgx.Tx) (producerTx, error) {
	if p, ok := tx.(producerTx); ok {
		return p, nil
	}
	conn := tx.Conn()
	pc := conn.PgConn()
	direct, known := pc.CustomData()[directKey].(bool)
	if !known {
		pid, err := store.ProducerBackendPID(ctx, tx)
		if err != nil {
			return producerTx{}, fmt.Errorf("outbox: ask the server for its session: %w", err)
		}
		direct = pid == pc.PID()
		pc.CustomData()[directKey] = direct
	}
	def := conn.Config().DefaultQueryExecMode
	p := producerTx{Tx: tx, mode: def, batches: true}
	if !direct {
		p.mode = pgx.QueryExecModeExec
		p.batches = def != pgx.QueryExecModeCacheStatement
	}
	return p, nil
}

// Query is tx.Query in the statements' mode.
func (p producerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.Tx.Query(ctx, sql, append([]any{p.mode}, args...)...)
}

// QueryRow is tx.QueryRow in the statements' mode.
func (p producerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.Tx.QueryRow(ctx, sql, append([]any{p.mode}, args...)...)
}

// Exec is tx.Exec in the statements' mode.
func (p producerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.Tx.Exec(ctx, sql, append([]any{p.mode}, args...)...)
}
