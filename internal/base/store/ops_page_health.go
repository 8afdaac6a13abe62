package store

import (
	"context"
	"time"
)

// The reads of the outbox page's health panel (cmd/internal/ops/outboxui,
// health.go). They run in one transaction (planguard.Run): one snapshot
// and one now().

// PageHealthHead is what the health panel reads first: the database's
// clock, the start of the error rate's window, the workers' leases, the
// budget's pause and the last send on the tally.
type PageHealthHead struct {
	// AsOf is the database's now(); WindowFrom the start of the error
	// rate's window.
	AsOf, WindowFrom time.Time
	// LiveWorkers hold their liveness lease; LastRenewed is the newest
	// heartbeat of any (nil: none).
	LiveWorkers int64
	LastRenewed *time.Time
	// PausedUntil is the latest pause of a rate budget still ahead (nil:
	// none).
	PausedUntil *time.Time
	// LastSent is the minute of the newest send on the tally's per-minute
	// buckets; SentBefore says whether older sends are on record.
	LastSent   *time.Time
	SentBefore bool
}

// pageHealthHeadSQL reads the clock, the window's start ($1 whole minutes
// before the current one), the live workers and their newest heartbeat,
// the latest pause ahead, the minute of the newest send on the tally, and
// whether older sends (folded minutes) are on record.
const pageHealthHeadSQL = `SELECT now(), date_trunc('minute', now()) - $1 * interval '1 minute',
				(SELECT count(*) FROM sendonce_worker WHERE ended_at IS NULL AND lease_until > now()),
				(SELECT max(renewed_at) FROM sendonce_worker),
				(SELECT max(paused_until) FROM sendonce_rate_budget WHERE paused_until > now()),
				(SELECT max(minute) FROM (SELECT minute FROM sendonce_outbox_tally WHERE state = 'sent' AND minute IS NOT NULL
					GROUP BY 1 HAVING sum(n) > 0) s),
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute IS NULL), 0) > 0`

// PageReadHealthHead reads the health panel's first figures, with the error
// rate's window starting windowMinutes whole minutes before the current
// one. The error is the statement's, unwrapped (the caller says what it
// read).
func PageReadHealthHead(ctx context.Context, tx DB, windowMinutes int) (PageHealthHead, error) {
	var h PageHealthHead
	err := tx.QueryRow(ctx, pageHealthHeadSQL, windowMinutes).
		Scan(&h.AsOf, &h.WindowFrom, &h.LiveWorkers, &h.LastRenewed, &h.PausedUntil, &h.LastSent, &h.SentBefore)
	return h, err
}

// pageRetryingSQL reads the retrying intents (pending, attempted before),
// grouped by last error after a row for them all (GROUPING SETS: r is read
// once, through the pending rows' partial indexes), with the API errors'
// figures: $1 is the minute of the last send (NULL: none on record), $2
// the start of the error rate's window. Each row is: the total row?, the
// error, intents, of them after a 429, the soonest next attempt, the most
// tries spent, a key; the errors in the window, the API errors since the
// minute of the newest, the newest, the earliest failure after the last
// send's minute, the newest's error.
const pageRetryingSQL = `WITH r AS MATERIALIZED (
	SELECT coalesce(o.last_error, '') AS err, o.idempotency_key AS key, o.rate_limited > 0 AS limited,
		CASE WHEN o.job_id IS NULL THEN coalesce(o.next_attempt_at, o.send_at, o.created_at) ELSE j.scheduled_at END AS next_at,
		CASE WHEN o.job_id IS NULL THEN o.tries ELSE o.attempts END AS tries,
		CASE WHEN o.last_error IS NOT NULL AND (o.next_attempt_at IS NOT NULL OR o.job_id IS NOT NULL) THEN o.updated_at END AS failed_at,
		o.first_attempt_at
	FROM sendonce_outbox o LEFT JOIN river_job j ON j.id = o.job_id
	WHERE o.state = 'pending' AND o.attempts > 0),
e AS (SELECT max(failed_at) FILTER (WHERE NOT limited) AS newest FROM r)
SELECT grouping(err) = 1, coalesce(err, ''), count(*), count(*) FILTER (WHERE limited),
	min(next_at), coalesce(max(tries), 0), coalesce(min(key), ''),
	count(*) FILTER (WHERE failed_at >= $2),
	count(*) FILTER (WHERE NOT limited AND failed_at >= date_trunc('minute', (SELECT newest FROM e))),
	max(failed_at) FILTER (WHERE NOT limited),
	min(CASE WHEN NOT limited AND failed_at IS NOT NULL THEN
		CASE WHEN $1::timestamptz IS NULL OR first_attempt_at >= $1 THEN first_attempt_at WHEN failed_at >= $1 THEN failed_at END END),
	coalesce((SELECT err FROM r WHERE NOT limited AND failed_at IS NOT NULL ORDER BY failed_at DESC LIMIT 1), '')
FROM r GROUP BY GROUPING SETS ((err), ())
ORDER BY grouping(err) DESC, count(*) DESC, err LIMIT 11`

// PageRetrying is a row of pageRetryingSQL: the row for all the retrying
// intents (Total) or a group of them that share their last error.
type PageRetrying struct {
	Total bool
	Error string
	// N intents, RateLimited of them waiting after a 429.
	N, RateLimited int64
	// Next is the soonest next attempt; MaxTries the most tries spent;
	// Example a key.
	Next     *time.Time
	MaxTries int
	Example  string
	// InWindow counts the errors in the window, SinceNewest the API errors
	// since the minute of the newest, Newest is the newest, First the
	// earliest failure after the last send's minute, LastError the newest's
	// error.
	InWindow, SinceNewest int64
	Newest, First         *time.Time
	LastError             string
}

// PageReadRetrying reads the retrying intents, the row for them all first,
// then at most ten groups by last error, largest first; lastSent is the
// minute of the last send (nil: none on record), windowFrom the start of
// the error rate's window. The error is the statement's, unwrapped.
func PageReadRetrying(ctx context.Context, tx DB, lastSent *time.Time, windowFrom time.Time) ([]PageRetrying, error) {
	rows, err := tx.Query(ctx, pageRetryingSQL, lastSent, windowFrom)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PageRetrying
	for rows.Next() {
		var g PageRetrying
		if err := rows.Scan(&g.Total, &g.Error, &g.N, &g.RateLimited, &g.Next, &g.MaxTries, &g.Example,
			&g.InWindow, &g.SinceNewest, &g.Newest, &g.First, &g.LastError); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	rows.Close()
	return out, rows.Err()
}

// pageHealthWindowSQL reads the sends of the window (from $1) and since
// the minute of the newest error ($2), from the tally; and the intents
// parked in the window, through sendonce_outbox_failed_idx.
const pageHealthWindowSQL = `SELECT
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute >= $1), 0)::int8,
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute >= date_trunc('minute', $2::timestamptz)), 0)::int8,
				(SELECT count(*) FROM sendonce_outbox WHERE state = 'failed' AND updated_at >= $1)`

// PageReadHealthWindow counts the intents sent since windowFrom and since
// the minute of newestErr (nil: none), and those parked as failed since
// windowFrom. The error is the statement's, unwrapped.
func PageReadHealthWindow(ctx context.Context, tx DB, windowFrom time.Time, newestErr *time.Time) (sent, sentSinceErr, failed int64, err error) {
	err = tx.QueryRow(ctx, pageHealthWindowSQL, windowFrom, newestErr).Scan(&sent, &sentSinceErr, &failed)
	return sent, sentSinceErr, failed, err
}
