package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retry puts a failed intent back to pending with the same key and a new
// River job, and restarts its attempt count and replay window. A send that
// failed with a permanent API error never reached the API, so retrying it
// (after fixing the cause) is safe. One parked because its replay window
// ran out may have reached the API in an earlier attempt: if the API no
// longer remembers its key, a retry can deliver it a second time.
func (o *Outbox) Retry(ctx context.Context, key string) (*Record, error) {
	var rec *Record
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := scanRecord(tx.QueryRow(ctx, `SELECT `+columns+` FROM sendonce_outbox WHERE idempotency_key = $1 FOR UPDATE`, key))
		if err != nil {
			return notFound(err, key)
		}
		if cur.State != StateFailed {
			return &StateError{Key: key, Op: "retry", State: cur.State, Reason: "only a failed intent can be retried"}
		}
		var sendAt time.Time
		if cur.SendAt != nil {
			sendAt = *cur.SendAt
		}
		job, err := o.river.InsertTx(ctx, tx, SendArgs{Key: key}, o.insertOpts(sendAt))
		if err != nil {
			return fmt.Errorf("insert river job: %w", err)
		}
		rec, err = scanRecord(tx.QueryRow(ctx, `UPDATE sendonce_outbox
			SET state = 'pending', attempts = 0, first_attempt_at = NULL, job_id = $2,
				last_error = 'retried by operator after: ' || coalesce(last_error, ''), updated_at = now()
			WHERE id = $1 RETURNING `+columns, cur.ID, job.Job.ID))
		return err
	})
	if err != nil {
		var se *StateError
		if errors.As(err, &se) || errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox: retry: %w", err)
	}
	return rec, nil
}
