package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The reads of the outbox page (cmd/internal/ops/outboxui) beside those of
// package outbox: the intent page's extras, the list's last attempts, the
// overview's counts, failures, chart and workers. The health panel's are
// in ops_page_health.go.

// PageIntentExtra is what the intent page reads of an intent's row beyond
// its record: its run ("" when none), whether it is scheduled (pending,
// with a send time ahead), and its place on the drain.
type PageIntentExtra struct {
	RunKey        string
	Scheduled     bool
	Queue         string
	Tries         int
	NextAttemptAt *time.Time
}

// pageIntentExtraSQL reads an intent's run, whether it is scheduled by the
// database's clock, and its queue, tries and next attempt.
const pageIntentExtraSQL = `SELECT coalesce(run_key, ''), coalesce(state = 'pending' AND send_at > now(), false),
			queue, tries, next_attempt_at FROM sendonce_outbox WHERE id = $1`

// PageReadIntentExtra reads the run, the schedule and the drain's figures
// of the intent id. The error is the statement's, unwrapped (the caller
// names the intent).
func PageReadIntentExtra(ctx context.Context, db DB, id int64) (PageIntentExtra, error) {
	var x PageIntentExtra
	err := db.QueryRow(ctx, pageIntentExtraSQL, id).Scan(&x.RunKey, &x.Scheduled, &x.Queue, &x.Tries, &x.NextAttemptAt)
	return x, err
}

// PageJob is an intent's River job as the intent page shows it.
type PageJob struct {
	State       string
	Attempt     int
	MaxAttempts int
	Kind        string
	AttemptedAt *time.Time // the job's last attempt
}

// pageJobSQL reads a River job's state, attempts, kind and last attempt.
const pageJobSQL = `SELECT state::text, attempt, max_attempts, kind, attempted_at FROM river_job WHERE id = $1`

// PageReadJob reads the River job id. A job River has cleaned away returns
// pgx.ErrNoRows; errors are the statement's, unwrapped.
func PageReadJob(ctx context.Context, db DB, id int64) (PageJob, error) {
	var j PageJob
	err := db.QueryRow(ctx, pageJobSQL, id).Scan(&j.State, &j.Attempt, &j.MaxAttempts, &j.Kind, &j.AttemptedAt)
	return j, err
}

// PageEvent is a webhook event stored for an intent (sendonce_event), its
// raw body as text.
type PageEvent struct {
	DeliveryID string
	Type       string
	OccurredAt time.Time
	ReceivedAt time.Time
	Raw        string
}

// pageEventsSQL reads an intent's events, oldest first, at most 200.
const pageEventsSQL = `SELECT delivery_id, type, occurred_at, received_at, raw::text
		FROM sendonce_event WHERE intent_id = $1 ORDER BY occurred_at, received_at LIMIT 200`

// PageReadEvents reads the webhook events of the intent id, oldest first,
// at most 200. The error is the statement's, unwrapped.
func PageReadEvents(ctx context.Context, db DB, intentID int64) ([]PageEvent, error) {
	rows, err := db.Query(ctx, pageEventsSQL, intentID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PageEvent])
}

// PageJobAttempt is a row of pageJobAttemptsSQL: a job's last attempt, or
// (ID 0, AttemptedAt nil) the row that only carries the clock; Now is the
// database's now() on every row.
type PageJobAttempt struct {
	ID          int64
	AttemptedAt *time.Time
	Now         time.Time
}

// pageJobAttemptsSQL reads when each of the River jobs $1 last attempted
// (those that did, and River has not cleaned away), and the database's
// clock, on a row of its own too so that it comes with no job.
const pageJobAttemptsSQL = `SELECT id, attempted_at, now() FROM river_job WHERE id = ANY($1) AND attempted_at IS NOT NULL
		UNION ALL SELECT 0, NULL, now()`

// PageReadJobAttempts reads when each of the River jobs ids last attempted,
// and the database's clock (one statement for a page of the list). The
// error is the statement's, unwrapped.
func PageReadJobAttempts(ctx context.Context, db DB, ids []int64) ([]PageJobAttempt, error) {
	rows, err := db.Query(ctx, pageJobAttemptsSQL, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PageJobAttempt
	for rows.Next() {
		var a PageJobAttempt
		if err := rows.Scan(&a.ID, &a.AttemptedAt, &a.Now); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	rows.Close()
	return out, rows.Err()
}

// PageSending is a row of pageSendingSQL: the intents sending under one
// worker's lease (Epoch), or (Epoch nil, N 0) the row that only carries
// the clock; Now is the database's now() on every row.
type PageSending struct {
	Epoch *int32
	N     int64
	Now   time.Time
}

// pageSendingSQL counts the intents sending per lease they were claimed
// under, with the database's clock, on a row of its own too so that it
// comes with none sending.
const pageSendingSQL = `SELECT claimed_by, count(*), now() FROM sendonce_outbox
		WHERE state = 'sending' AND claimed_by IS NOT NULL GROUP BY 1
		UNION ALL SELECT NULL, 0, now()`

// PageReadSending counts the intents in flight per worker lease (its
// epoch), with the database's clock. The error is the statement's,
// unwrapped.
func PageReadSending(ctx context.Context, db DB) ([]PageSending, error) {
	rows, err := db.Query(ctx, pageSendingSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PageSending
	for rows.Next() {
		var s PageSending
		if err := rows.Scan(&s.Epoch, &s.N, &s.Now); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	rows.Close()
	return out, rows.Err()
}

// PageDue is the overview's split of the pending intents: due now, or held
// until a send time ahead (NextScheduled the soonest); and when any
// worker last stored a webhook event.
type PageDue struct {
	Due, Scheduled int64
	NextScheduled  *time.Time
	LastEvent      *time.Time
}

// pageDueSQL splits the pending intents into due and scheduled, by the
// database's clock, and reads the newest event's arrival. Run it through
// planguard.Run: the pending intents through their partial index,
// whatever the statistics say.
const pageDueSQL = `SELECT count(*) FILTER (WHERE send_at IS NULL OR send_at <= now()),
				count(*) FILTER (WHERE send_at > now()), min(send_at) FILTER (WHERE send_at > now()),
				(SELECT max(received_at) FROM sendonce_event)
			FROM sendonce_outbox WHERE state = 'pending'`

// PageReadDue counts the pending intents due now and scheduled, the
// soonest send time ahead, and the newest event's arrival. The error is
// the statement's, unwrapped.
func PageReadDue(ctx context.Context, tx DB) (PageDue, error) {
	var d PageDue
	err := tx.QueryRow(ctx, pageDueSQL).Scan(&d.Due, &d.Scheduled, &d.NextScheduled, &d.LastEvent)
	return d, err
}

// PageFailureGroup is the failed intents of the last day that share an
// error: how many, how many of them uncertain, the latest, and one key.
type PageFailureGroup struct {
	Error     string
	N         int64
	Uncertain int64
	Latest    time.Time
	Example   string
}

// pageRecentFailuresSQL groups the intents that failed in the last day by
// error, the ten largest groups.
const pageRecentFailuresSQL = `SELECT coalesce(last_error, ''), count(*), count(*) FILTER (WHERE uncertain), max(updated_at), min(idempotency_key)
		FROM sendonce_outbox WHERE state = 'failed' AND updated_at > now() - interval '1 day'
		GROUP BY 1 ORDER BY 2 DESC, 3 DESC LIMIT 10`

// PageReadRecentFailures groups the intents that failed in the last day by
// error, the ten largest groups first. The error is the statement's,
// unwrapped.
func PageReadRecentFailures(ctx context.Context, db DB) ([]PageFailureGroup, error) {
	rows, err := db.Query(ctx, pageRecentFailuresSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PageFailureGroup, error) {
		var g PageFailureGroup
		err := r.Scan(&g.Error, &g.N, &g.Uncertain, &g.Latest, &g.Example)
		return g, err
	})
}

// PageMinute is the intents sent in one minute.
type PageMinute struct {
	At time.Time
	N  int64
}

// pageSendsPerMinuteSQL counts the sends of each of the last 60 minutes of
// the database's clock, from the per-minute buckets of the outbox's tally
// (see migration 00022): no read of the table, whatever its size.
const pageSendsPerMinuteSQL = `WITH s AS (
			SELECT minute AS m, sum(n)::bigint AS n FROM sendonce_outbox_tally
			WHERE state = 'sent' AND minute >= date_trunc('minute', now()) - interval '59 minutes'
			GROUP BY 1)
		SELECT g.m, coalesce(s.n, 0)
		FROM generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()), interval '1 minute') AS g(m)
		LEFT JOIN s ON s.m = g.m ORDER BY g.m`

// PageReadSendsPerMinute counts the intents sent in each of the last 60
// minutes of the database's clock, oldest first, the current (partial)
// minute last. The error is the statement's, unwrapped.
func PageReadSendsPerMinute(ctx context.Context, db DB) ([]PageMinute, error) {
	rows, err := db.Query(ctx, pageSendsPerMinuteSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PageMinute])
}
