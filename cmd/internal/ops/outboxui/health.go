package outboxui

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/base/planguard"
)

// The verdicts of the health panel, the first that holds, in this order.
const (
	verdictNoWorker = "no-worker" // no worker holds its liveness lease
	verdictQuota    = "quota"     // a quota of the API key is used up
	verdictPaused   = "paused"    // the fleet's budget waits out a Retry-After
	verdictFailing  = "failing"   // the API's latest answers are errors
	verdictSending  = "sending"
)

// healthWindow is the window of the error rate, in whole minutes of the
// send tally (the current, partial, one and the four before it).
const healthWindow = 5

// retryingSQL reads the retrying intents (pending, attempted before),
// grouped by last error after a row for them all (GROUPING SETS: r is read
// once, through the pending rows' partial indexes), with the API errors'
// figures: $1 is the minute of the last send (NULL: none on record), $2
// the start of the error rate's window. Each row is: the total row?, the
// error, intents, of them after a 429, the soonest next attempt, the most
// tries spent, a key; the errors in the window, the API errors since the
// minute of the newest, the newest, the earliest failure after the last
// send's minute, the newest's error.
const retryingSQL = `WITH r AS MATERIALIZED (
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

// health answers "is sending healthy?" at the top of the overview, from
// the database alone (the whole fleet, whichever worker serves the page).
//
// Nothing records each API call with its time, so it reads what the rows
// and tallies hold, per intent:
//   - a success is a sent intent, counted per minute of its sent_at by the
//     send tally (sendonce_outbox_tally, as the chart): the last successful
//     send is known to the minute, and only for two hours (older minutes
//     are folded together);
//   - an API error is an attempt a worker recorded to be tried again: a
//     pending intent with next_attempt_at (only MarkPending sets it, to the
//     next attempt, and the claim clears it; a rescue or an operator's
//     retry leaves it NULL) or with a River job of its own, its last_error
//     and, as updated_at, the time of that record; and an intent parked as
//     failed (its updated_at through sendonce_outbox_failed_idx). Only each
//     intent's latest error has a time: a retry overwrites the one before.
//
// The API is failing when, from the start of the minute of the newest API
// error (a 429 aside: it pauses the budget) to now, more intents ended in
// an API error than were sent: the newest outcome on record is an error,
// judged to the minute the tally allows. With the API down, every new
// intent adds an error and none a send, so it shows within the first
// attempts; a 5xx among steady sends does not.
type health struct {
	Verdict string
	// AsOf is the database's clock when the page read it.
	AsOf time.Time
	// Since is when failing began: the earliest failed attempt on record
	// after the last successful send's minute. Until is the end of a pause
	// or of an exhausted quota.
	Since, Until *time.Time
	// LastError is the newest API error (a 429 aside).
	LastError string
	// Quota says which quota is exhausted, and how the fleet probes.
	Quota string
	// LiveWorkers hold their lease; LastRenewed is the newest heartbeat of
	// any (nil: no worker in the last day).
	LiveWorkers int64
	LastRenewed *time.Time
	// LastSent is the minute of the newest send in the last two hours;
	// SentBefore says whether older sends are on record.
	LastSent   *time.Time
	SentBefore bool
	// Errors and Sent count, over the window from WindowFrom, the intents
	// whose latest attempt ended in an API error (retrying or parked) and
	// those sent.
	WindowFrom   time.Time
	Errors, Sent int64
	// Due is the pending intents due now (the overview's count).
	Due      int64
	Retrying retrying
}

// ErrorPercent is Errors of Errors and Sent, in percent, rounded.
func (h health) ErrorPercent() int64 {
	if h.Errors+h.Sent == 0 {
		return 0
	}
	return (h.Errors*100 + (h.Errors+h.Sent)/2) / (h.Errors + h.Sent)
}

// retrying is the pending intents that were attempted and wait for another
// attempt, grouped by their last error.
type retrying struct {
	N, RateLimited int64
	Groups         []retryGroup
	// More is how many intents the groups shown leave out.
	More int64
	// MaxAttempts is the workers' --max-attempts, 0 when not known.
	MaxAttempts int
}

type retryGroup struct {
	Error string
	N     int64
	// RateLimited are those waiting after a 429: its wait spends no try.
	RateLimited int64
	// Next is the soonest next attempt among them; DueNow says it is
	// past.
	Next   *time.Time
	DueNow bool
	// MaxTries is the most tries any of them spent, which the workers count
	// against their --max-attempts.
	MaxTries int
	Example  string
	// Left is the fewest attempts any of them has left, when MaxAttempts is
	// known (-1 otherwise).
	Left int
}

// readHealth reads the health panel. due is the overview's count of due
// intents, budgets the budget rows it read.
func (h *Handler) readHealth(ctx context.Context, due int64, budgets []budget.Status) (health, error) {
	hl := health{Due: due, Retrying: retrying{MaxAttempts: h.opts.MaxAttempts}}
	var pausedUntil, newestErr, since *time.Time
	var sentSinceErr, errorsSinceErr, failedInWindow int64
	// The pending rows through their partial indexes only (planguard.Run),
	// all in one snapshot and one now().
	err := planguard.Run(ctx, h.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now(), date_trunc('minute', now()) - $1 * interval '1 minute',
				(SELECT count(*) FROM sendonce_worker WHERE ended_at IS NULL AND lease_until > now()),
				(SELECT max(renewed_at) FROM sendonce_worker),
				(SELECT max(paused_until) FROM sendonce_rate_budget WHERE paused_until > now()),
				(SELECT max(minute) FROM (SELECT minute FROM sendonce_outbox_tally WHERE state = 'sent' AND minute IS NOT NULL
					GROUP BY 1 HAVING sum(n) > 0) s),
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute IS NULL), 0) > 0`,
			healthWindow-1).Scan(&hl.AsOf, &hl.WindowFrom, &hl.LiveWorkers, &hl.LastRenewed, &pausedUntil, &hl.LastSent, &hl.SentBefore); err != nil {
			return fmt.Errorf("workers, budget and last send: %w", err)
		}
		// The retrying intents, grouped by last error, after a row for
		// them all (GROUPING SETS): r is read once.
		rows, err := tx.Query(ctx, retryingSQL, hl.LastSent, hl.WindowFrom)
		if err != nil {
			return fmt.Errorf("retrying intents: %w", err)
		}
		var shown int64
		for rows.Next() {
			var total bool
			var g retryGroup
			var inWindow, sinceNewest int64
			var newest, first *time.Time
			var lastErr string
			if err := rows.Scan(&total, &g.Error, &g.N, &g.RateLimited, &g.Next, &g.MaxTries, &g.Example,
				&inWindow, &sinceNewest, &newest, &first, &lastErr); err != nil {
				rows.Close()
				return fmt.Errorf("retrying intents: %w", err)
			}
			if total {
				hl.Retrying.N, hl.Retrying.RateLimited = g.N, g.RateLimited
				hl.Errors, errorsSinceErr, newestErr, since, hl.LastError = inWindow, sinceNewest, newest, first, lastErr
				continue
			}
			g.Left = -1
			g.DueNow = g.Next != nil && !g.Next.After(hl.AsOf)
			if m := h.opts.MaxAttempts; m > 0 {
				g.Left = max(0, m-g.MaxTries)
			}
			shown += g.N
			hl.Retrying.Groups = append(hl.Retrying.Groups, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("retrying intents: %w", err)
		}
		hl.Retrying.More = hl.Retrying.N - shown
		// The sends of the window and since the newest error's minute, from
		// the tally; the intents parked in the window, through
		// sendonce_outbox_failed_idx.
		if err := tx.QueryRow(ctx, `SELECT
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute >= $1), 0)::int8,
				coalesce((SELECT sum(n) FROM sendonce_outbox_tally WHERE state = 'sent' AND minute >= date_trunc('minute', $2::timestamptz)), 0)::int8,
				(SELECT count(*) FROM sendonce_outbox WHERE state = 'failed' AND updated_at >= $1)`,
			hl.WindowFrom, newestErr).Scan(&hl.Sent, &sentSinceErr, &failedInWindow); err != nil {
			return fmt.Errorf("sends and failures of the last %d minutes: %w", healthWindow, err)
		}
		return nil
	})
	if err != nil {
		return health{}, fmt.Errorf("outboxui: health: %w", err)
	}
	hl.Errors += failedInWindow

	var quotaUntil *time.Time
	for _, b := range budgets {
		for _, q := range b.Quotas {
			if q.ExhaustedUntil != nil && (quotaUntil == nil || q.ExhaustedUntil.After(*quotaUntil)) {
				quotaUntil, hl.Quota = q.ExhaustedUntil, q.Describe()
			}
		}
	}
	switch {
	case hl.LiveWorkers == 0:
		hl.Verdict = verdictNoWorker
	case quotaUntil != nil:
		hl.Verdict, hl.Until = verdictQuota, quotaUntil
	case pausedUntil != nil:
		hl.Verdict, hl.Until = verdictPaused, pausedUntil
	case newestErr != nil && errorsSinceErr > sentSinceErr:
		hl.Verdict, hl.Since = verdictFailing, since
		if hl.Since == nil {
			hl.Since = newestErr
		}
	default:
		hl.Verdict = verdictSending
	}
	return hl, nil
}

// Attempted is the intents the error rate counts: Errors and Sent.
func (h health) Attempted() int64 { return h.Errors + h.Sent }

// formatMinute shows a time's minute in UTC.
func formatMinute(t any) string {
	switch x := t.(type) {
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04Z")
	case *time.Time:
		if x != nil {
			return x.UTC().Format("2006-01-02 15:04Z")
		}
	}
	return "—"
}

func init() {
	funcs["minute"] = formatMinute
	funcs["window"] = func() int { return healthWindow }
}
