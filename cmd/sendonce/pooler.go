package main

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// poolerMode is --pooler: what stands between sendonce and PostgreSQL.
// Only transaction pooling changes anything: a client's transactions run
// on whichever server connection is free, so nothing of a session lasts
// past a commit (prepared statements, LISTEN, session locks).
type poolerMode string

const (
	poolerNone        poolerMode = "none"
	poolerSession     poolerMode = "session"
	poolerTransaction poolerMode = "transaction"
)

func (m *poolerMode) String() string { return string(*m) }

// Set takes one of the three modes.
func (m *poolerMode) Set(v string) error {
	switch poolerMode(v) {
	case poolerNone, poolerSession, poolerTransaction:
		*m = poolerMode(v)
		return nil
	}
	return usagef("want none, session or transaction")
}

// Type names the flag's values in the help.
func (m *poolerMode) Type() string { return "mode" }

// configure sets a pool for the pooler: behind transaction pooling, every
// statement of the pool (sendonce's and River's) runs in pgx's
// QueryExecModeExec, one round trip with the unnamed statement, instead of
// pgx's default named prepared statements, which a server connection of
// another client's transaction does not have (26000) or has already
// (42P05). A URL that asks for named statements itself is refused.
func (m poolerMode) configure(cfg *pgxpool.Config, dsn string) error {
	if m != poolerTransaction {
		return nil
	}
	if strings.Contains(dsn, "default_query_exec_mode") {
		if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			return usagef("the database URL's default_query_exec_mode=cache_statement names prepared statements, which --pooler transaction cannot keep: leave it out (sendonce then uses exec), or use exec or simple_protocol")
		}
		return nil
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	return nil
}

// hint is what an error of a prepared statement the server connection does
// not have (26000) or has from another client (42P05) most likely means,
// when no --pooler transaction was given: the connection goes through a
// transaction-mode pooler.
func (m poolerMode) hint(err error) string {
	var pgErr *pgconn.PgError
	if m == poolerTransaction || !errors.As(err, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
		return ""
	}
	return " (through a transaction-mode pooler such as PgBouncer? give --pooler transaction, or SENDONCE_POOLER=transaction)"
}
