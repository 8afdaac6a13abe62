package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// outboxBackendPIDSQL asks the server which session a connection talks to
// (see package outbox's pooler.go: a pooler answers with a key of its own
// at connect, so a process id that differs tells a pooler).
const outboxBackendPIDSQL = `SELECT pg_backend_pid()`

// ProducerBackendPID returns the process id of the server session db
// talks to, asked in QueryExecModeExec (the unnamed statement: nothing
// left behind on a pooler's server connection). The error is the
// database's, unwrapped.
func ProducerBackendPID(ctx context.Context, db DB) (uint32, error) {
	var pid uint32
	err := db.QueryRow(ctx, outboxBackendPIDSQL, pgx.QueryExecModeExec).Scan(&pid)
	return pid, err
}
