package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The states of an intent (sendonce_outbox.state); package outbox names
// them as outbox.State.
const (
	StatePending    = "pending"
	StateSending    = "sending"
	StateSent       = "sent"
	StateFailed     = "failed"
	StateCanceled   = "canceled"
	StateSuppressed = "suppressed"
)
