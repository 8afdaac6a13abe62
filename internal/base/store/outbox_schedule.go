package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of package outbox's schedules (schedule.go): an
// operator's saves, lists and deletes of sendonce_schedule's rows. The
// workers' ticks of them are the worker's.

// SavedSchedule is a row of sendonce_schedule as package outbox saves and
// lists it.
type SavedSchedule struct {
	Name, Spec string
	// Producer or Statement: one of the two is set.
	Producer, Statement string
	Missed              string
	NextAt              time.Time
	Topic               string
	Tenant              string
	// Read only: the last run made, and the failures of the due
	// occurrence.
	LastRun   string
	Failures  int
	LastError string
	FailedAt  *time.Time
	RetryAt   *time.Time
}

// outboxSaveScheduleSQL creates or replaces schedule $1; replacing a
// failing schedule clears its failures.
const outboxSaveScheduleSQL = `INSERT INTO sendonce_schedule (name, spec, producer, statement, missed, next_at, topic, tenant)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, ''))
		ON CONFLICT (name) DO UPDATE SET spec = $2, producer = $3, statement = $4, missed = $5, next_at = $6, topic = nullif($7, ''),
			tenant = nullif($8, ''),
			failures = 0, last_error = NULL, failed_at = NULL, retry_at = NULL, updated_at = now()`

// SaveSchedule creates or replaces the schedule s.Name (its Name, Spec,
// Producer or Statement, Missed, NextAt, Topic and Tenant; "" is NULL for
// Producer, Statement, Topic and Tenant), clearing its failures. The error is the
// database's, unwrapped.
func SaveSchedule(ctx context.Context, db DB, s *SavedSchedule) error {
	var producer, statement *string
	if s.Producer != "" {
		producer = &s.Producer
	} else {
		statement = &s.Statement
	}
	_, err := db.Exec(ctx, outboxSaveScheduleSQL, s.Name, s.Spec, producer, statement, s.Missed, s.NextAt, s.Topic, s.Tenant)
	return err
}

// outboxSchedulesSQL lists the schedules by name.
const outboxSchedulesSQL = `SELECT name, spec, coalesce(producer, ''), coalesce(statement, ''), missed, next_at, coalesce(last_run, ''),
			failures, coalesce(last_error, ''), failed_at, retry_at, coalesce(topic, ''),
			coalesce(tenant, '')
		FROM sendonce_schedule ORDER BY name`

// ListSchedules returns every schedule, by name. The error is the
// database's, unwrapped.
func ListSchedules(ctx context.Context, db DB) ([]*SavedSchedule, error) {
	rows, err := db.Query(ctx, outboxSchedulesSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*SavedSchedule, error) {
		s := &SavedSchedule{}
		return s, r.Scan(&s.Name, &s.Spec, &s.Producer, &s.Statement, &s.Missed, &s.NextAt, &s.LastRun,
			&s.Failures, &s.LastError, &s.FailedAt, &s.RetryAt, &s.Topic, &s.Tenant)
	})
}

// outboxDeleteScheduleSQL deletes schedule $1.
const outboxDeleteScheduleSQL = `DELETE FROM sendonce_schedule WHERE name = $1`

// DeleteSchedule deletes the schedule name (the runs it made stay), and
// reports whether there was one. The error is the database's, unwrapped.
func DeleteSchedule(ctx context.Context, db DB, name string) (bool, error) {
	tag, err := db.Exec(ctx, outboxDeleteScheduleSQL, name)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}
