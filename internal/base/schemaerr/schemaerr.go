// Package schemaerr tells a database that lacks sendonce's schema from
// other failures, after the fact: the SQLSTATE of a failed statement of
// ours that names a missing table, column, function or type means the
// database was not migrated (or only in part), and the error returned then
// matches migrations.ErrPending, whose text names the fix. Enqueue's hot
// path costs nothing for it: no query checks the schema before a statement.
package schemaerr

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/migrations"
)

// missing are the SQLSTATEs of an object that is not there. Every statement
// the outbox and the worker run is theirs, against their own schema, so one
// of these can only mean a migration is pending.
var missing = map[string]bool{
	"42P01": true, // undefined_table (and sequences, such as river_job_id_seq)
	"42703": true, // undefined_column (a schema of an older release)
	"42883": true, // undefined_function
	"42704": true, // undefined_object (a type, such as river_job_state)
}

// Missing reports whether err is a statement's failure on an object of the
// schema that does not exist.
func Missing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && missing[pgErr.Code]
}

// Wrap returns err unchanged unless it is Missing; then an error that
// matches both migrations.ErrPending and err, such as
// "outbox: enqueue: the database needs migrating: run `sendonce migrate`
// (or migrations.Up from Go): ERROR: relation "river_job_id_seq" does not
// exist (SQLSTATE 42P01)". op names what failed.
func Wrap(op string, err error) error {
	if err == nil || !Missing(err) {
		return err
	}
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	return fmt.Errorf("%s: %w: %w", op, migrations.ErrPending, pgErr)
}
