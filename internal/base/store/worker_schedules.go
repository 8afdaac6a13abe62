package store

import (
	"context"
	"time"
)

// The statements of the worker's schedule ticker (package worker,
// schedules.go) on sendonce_schedule and sendonce_run.

// workerScheduleDueInSQL reads how long until the first of the schedules
// whose producer is in $1 (or that have none) comes due, or its retry, in
// seconds by the database's clock (NULL: none).
const workerScheduleDueInSQL = `SELECT extract(epoch FROM min(greatest(next_at, coalesce(retry_at, next_at))) - now())::float8
		FROM sendonce_schedule WHERE producer IS NULL OR producer = ANY($1)`

// WorkerScheduleDueIn returns how many seconds until the first of the
// schedules a worker with the Go producers named producers ticks comes due
// (or its retry does), by the database's clock; nil when there is none.
// The error is the statement's, unwrapped.
func WorkerScheduleDueIn(ctx context.Context, db DB, producers []string) (*float64, error) {
	var in *float64
	err := db.QueryRow(ctx, workerScheduleDueInSQL, producers).Scan(&in)
	return in, err
}

// WorkerSchedule is a due schedule as WorkerTakeDueSchedule reads it from
// sendonce_schedule: producer, statement and last_error are "" when NULL.
type WorkerSchedule struct {
	Name, Spec, Producer, Statement string
	Missed                          string
	NextAt                          time.Time
	Failures                        int
	LastError                       string
}

// workerTakeDueScheduleSQL takes the earliest due schedule whose producer
// is in $1 (or that has none) and whose retry, if any, is due, locked (SKIP
// LOCKED, so workers ticking at once take different ones), with the clock:
// $2, or the database's now().
const workerTakeDueScheduleSQL = `SELECT name, spec, coalesce(producer, ''), coalesce(statement, ''), missed, next_at,
				failures, coalesce(last_error, ''), coalesce($2, now())
			FROM sendonce_schedule WHERE next_at <= coalesce($2, now()) AND (retry_at IS NULL OR retry_at <= coalesce($2, now()))
				AND (producer IS NULL OR producer = ANY($1))
			ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED`

// WorkerTakeDueSchedule reads and locks (FOR UPDATE SKIP LOCKED) in tx
// the earliest due schedule that a worker with the Go producers named
// producers ticks, and returns it with the tick's clock: clock when not
// nil, the database's now() otherwise. With none due it returns
// pgx.ErrNoRows; errors are the statement's, unwrapped.
func WorkerTakeDueSchedule(ctx context.Context, tx DB, producers []string, clock *time.Time) (WorkerSchedule, time.Time, error) {
	var s WorkerSchedule
	var now time.Time
	err := tx.QueryRow(ctx, workerTakeDueScheduleSQL, producers, clock).
		Scan(&s.Name, &s.Spec, &s.Producer, &s.Statement, &s.Missed, &s.NextAt, &s.Failures, &s.LastError, &now)
	return s, now, err
}

// workerScheduleAdvanceSQL moves a schedule to its next occurrence ($2),
// records the run made ($4, when $3) and clears its failures.
const workerScheduleAdvanceSQL = `UPDATE sendonce_schedule SET next_at = $2,
			last_run = CASE WHEN $3 THEN $4 ELSE last_run END,
			failures = 0, last_error = NULL, failed_at = NULL, retry_at = NULL, updated_at = now() WHERE name = $1`

// WorkerScheduleAdvance moves the schedule name to its next occurrence
// next, records runKey as its last run when made, and clears its record of
// failures. The error is the statement's, unwrapped.
func WorkerScheduleAdvance(ctx context.Context, tx DB, name string, next time.Time, made bool, runKey string) error {
	_, err := tx.Exec(ctx, workerScheduleAdvanceSQL, name, next, made, runKey)
	return err
}

// workerRetakeScheduleSQL locks a schedule again, unless another worker
// took it meanwhile (its occurrence moved on, or its retry is ahead of $3).
const workerRetakeScheduleSQL = `SELECT failures, coalesce(last_error, '') FROM sendonce_schedule
			WHERE name = $1 AND next_at = $2 AND (retry_at IS NULL OR retry_at <= $3) FOR UPDATE SKIP LOCKED`

// WorkerRetakeSchedule locks in tx the schedule name, still due at nextAt
// and with no retry after now, and returns its failures and last error
// ("" when NULL). When another worker took it meanwhile it returns
// pgx.ErrNoRows; errors are the statement's, unwrapped.
func WorkerRetakeSchedule(ctx context.Context, tx DB, name string, nextAt, now time.Time) (failures int, lastError string, err error) {
	err = tx.QueryRow(ctx, workerRetakeScheduleSQL, name, nextAt, now).Scan(&failures, &lastError)
	return failures, lastError, err
}

// workerScheduleFailedSQL records a failed occurrence on its schedule: the
// occurrence stays due, to be tried again at retry_at.
const workerScheduleFailedSQL = `UPDATE sendonce_schedule SET failures = $2, last_error = $3, failed_at = $4, retry_at = $5,
		updated_at = now() WHERE name = $1`

// WorkerScheduleFailed records on the schedule name that its occurrence
// failed: the failures in a row, the error, when it failed and when to try
// again. The error is the statement's, unwrapped (the caller names the
// schedule and the cause).
func WorkerScheduleFailed(ctx context.Context, tx DB, name string, failures int, lastError string, failedAt, retryAt time.Time) error {
	_, err := tx.Exec(ctx, workerScheduleFailedSQL, name, failures, lastError, failedAt, retryAt)
	return err
}

// workerCreateRunSQL creates an occurrence's run, with its schedule's
// topic and tenant, unless the run is there already.
const workerCreateRunSQL = `INSERT INTO sendonce_run (key, schedule_name, occurrence, topic, tenant)
		SELECT $1, $2, $3, (SELECT topic FROM sendonce_schedule WHERE name = $2), (SELECT tenant FROM sendonce_schedule WHERE name = $2)
		ON CONFLICT (key) DO NOTHING`

// WorkerCreateRun creates the run key of the schedule name's occurrence at
// occurrence, with the schedule's topic and tenant, and reports whether it did (false:
// the run was there already). The error is the statement's, unwrapped.
func WorkerCreateRun(ctx context.Context, tx DB, key, name string, occurrence time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, workerCreateRunSQL, key, name, occurrence)
	return tag.RowsAffected() > 0, err
}
