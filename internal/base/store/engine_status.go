package store

import "context"

// The statements of a status hook's capture (migration 00032): a
// transaction that turns it on has the transitions of its statements on
// sendonce_outbox appended, by the trigger sendonce_outbox_status_capture,
// to its setting sendonce.statuses, which it reads back before it
// commits. The statements of the hot path (the marks) return what the hook
// is told of themselves instead (statusSQL).

// captureStatusesSQL is CaptureStatuses' statement.
const captureStatusesSQL = `SELECT set_config('sendonce.capture', 'on', true), set_config('sendonce.statuses', '', true)`

// CaptureStatuses turns the capture on for the rest of the transaction
// db is (a transaction: the settings are its own).
func CaptureStatuses(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, captureStatusesSQL)
	return err
}

// capturedStatusesSQL is CapturedStatuses' statement: the setting is read
// (in a materialized CTE, before the outer row) and then cleared.
const capturedStatusesSQL = `WITH s AS MATERIALIZED (SELECT coalesce(current_setting('sendonce.statuses', true), '') AS v)
	SELECT s.v, set_config('sendonce.capture', '', true), set_config('sendonce.statuses', '', true) FROM s`

// CapturedStatuses returns the transitions captured since CaptureStatuses
// (a JSON array of sendonce_status, or empty when none), and turns the
// capture off.
func CapturedStatuses(ctx context.Context, db DB) ([]byte, error) {
	var v, a, b string
	err := db.QueryRow(ctx, capturedStatusesSQL).Scan(&v, &a, &b)
	return []byte(v), err
}
