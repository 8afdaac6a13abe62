package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// NotifyChannel is the PostgreSQL channel on which the table's trigger
// announces rows inserted without a River job (by plain SQL).
const NotifyChannel = "sendonce_outbox"

// sweepBatch bounds the rows one Sweep schedules.
const sweepBatch = 1000

// Sweep gives a River job to pending intents that have none: rows that a
// producer in another language inserted with plain SQL. It returns how many
// it scheduled. Rows locked by a concurrent sweeper are skipped, so any
// number of workers may sweep at once.
func (o *Outbox) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := o.sweepOnce(ctx)
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

func (o *Outbox) sweepOnce(ctx context.Context) (int, error) {
	var n int
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, idempotency_key, send_at FROM sendonce_outbox
			WHERE job_id IS NULL AND state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, sweepBatch)
		if err != nil {
			return err
		}
		var ids []int64
		var params []river.InsertManyParams
		for rows.Next() {
			var id int64
			var key string
			var sendAt *time.Time
			if err := rows.Scan(&id, &key, &sendAt); err != nil {
				rows.Close()
				return err
			}
			var at time.Time
			if sendAt != nil {
				at = *sendAt
			}
			ids = append(ids, id)
			params = append(params, river.InsertManyParams{Args: SendArgs{Key: key}, InsertOpts: o.insertOpts(at)})
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		jobs, err := o.river.InsertManyTx(ctx, tx, params)
		if err != nil {
			return fmt.Errorf("insert river jobs: %w", err)
		}
		jobIDs := make([]int64, len(jobs))
		for i, j := range jobs {
			jobIDs[i] = j.Job.ID
		}
		if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox o SET job_id = u.job_id, updated_at = now()
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id) WHERE o.id = u.id`, ids, jobIDs); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: sweep: %w", err)
	}
	return n, nil
}
