package outboxui

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/base/store"
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
		head, err := store.PageReadHealthHead(ctx, tx, healthWindow-1)
		if err != nil {
			return fmt.Errorf("workers, budget and last send: %w", err)
		}
		hl.AsOf, hl.WindowFrom, hl.LiveWorkers, hl.LastRenewed = head.AsOf, head.WindowFrom, head.LiveWorkers, head.LastRenewed
		pausedUntil, hl.LastSent, hl.SentBefore = head.PausedUntil, head.LastSent, head.SentBefore
		// The retrying intents, grouped by last error, after a row for
		// them all (GROUPING SETS): r is read once.
		rows, err := store.PageReadRetrying(ctx, tx, hl.LastSent, hl.WindowFrom)
		if err != nil {
			return fmt.Errorf("retrying intents: %w", err)
		}
		var shown int64
		for _, row := range rows {
			if row.Total {
				hl.Retrying.N, hl.Retrying.RateLimited = row.N, row.RateLimited
				hl.Errors, errorsSinceErr, newestErr, since, hl.LastError = row.InWindow, row.SinceNewest, row.Newest, row.First, row.LastError
				continue
			}
			g := retryGroup{Error: row.Error, N: row.N, RateLimited: row.RateLimited, Next: row.Next, MaxTries: row.MaxTries, Example: row.Example}
			g.Left = -1
			g.DueNow = g.Next != nil && !g.Next.After(hl.AsOf)
			if m := h.opts.MaxAttempts; m > 0 {
				g.Left = max(0, m-g.MaxTries)
			}
			shown += g.N
			hl.Retrying.Groups = append(hl.Retrying.Groups, g)
		}
		hl.Retrying.More = hl.Retrying.N - shown
		// The sends of the window and since the newest error's minute, from
		// the tally; the intents parked in the window, through
		// sendonce_outbox_failed_idx.
		if hl.Sent, sentSinceErr, failedInWindow, err = store.PageReadHealthWindow(ctx, tx, hl.WindowFrom, newestErr); err != nil {
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
