package store

import (
	"context"
	"strings"
	"time"
)

// The statements of the runs' bounce-rate breaker (outbox/breaker.go;
// migration 00033). The trip itself is the trigger sendonce_run_breaker's,
// in the transaction that records a member's delivery status.

// outboxSetRunBreakerSQL sets run $1's breaker: thresholds $2 (bounces)
// and $3 (complaints), NULL for not watched, and minimum $4, and notes
// the change's time; it reads the run's state.
const outboxSetRunBreakerSQL = `UPDATE sendonce_run SET breaker_bounce_rate = $2, breaker_complaint_rate = $3,
			breaker_min_outcomes = $4, breaker_changed_at = clock_timestamp(), updated_at = now()
		WHERE key = $1 RETURNING state`

// SetRunBreaker sets the breaker of run key (outboxSetRunBreakerSQL) and
// returns the run's state. Its error is pgx.ErrNoRows when there is no
// such run, the database's otherwise, unwrapped.
func SetRunBreaker(ctx context.Context, db DB, key string, bounceRate, complaintRate *float64, minOutcomes int) (string, error) {
	var state string
	err := db.QueryRow(ctx, outboxSetRunBreakerSQL, key, bounceRate, complaintRate, minOutcomes).Scan(&state)
	return state, err
}

// outboxResumeBreakerSQL reads why the breaker paused run $1 (locked),
// when it tripped and when its settings last changed, and, if it paused
// it, clears the reason and starts the breaker's count afresh: from the
// counts as they are, so that the resumed run is judged on the outcomes
// that come after the resume only.
const outboxResumeBreakerSQL = `WITH b AS (SELECT pause_reason, breaker_tripped_at, breaker_changed_at,
				breaker_trip_known, breaker_trip_hard, breaker_trip_complained FROM sendonce_run WHERE key = $1),
			n AS (SELECT coalesce(sum(known), 0) AS known, coalesce(sum(hard), 0) AS hard,
				coalesce(sum(complained), 0) AS complained FROM sendonce_run_outcome WHERE run_key = $1),
			u AS (UPDATE sendonce_run r SET pause_reason = NULL, breaker_since_known = n.known,
				breaker_since_hard = n.hard, breaker_since_complained = n.complained
				FROM n WHERE r.key = $1 AND r.pause_reason IS NOT NULL)
		SELECT coalesce(pause_reason, ''), breaker_tripped_at, breaker_changed_at,
			coalesce(breaker_trip_known, 0), coalesce(breaker_trip_hard, 0), coalesce(breaker_trip_complained, 0) FROM b`

// BreakerResume is what ResumeBreaker found.
type BreakerResume struct {
	// Reason is why the breaker paused the run ("": it did not).
	Reason               string
	TrippedAt, ChangedAt *time.Time
	Known, Hard          int64
	Complained           int64
}

// ResumeBreaker reads the breaker of the locked run key and, if it paused
// the run, starts its count afresh (outboxResumeBreakerSQL). Its error is
// pgx.ErrNoRows when there is no such run, the database's otherwise,
// unwrapped.
func ResumeBreaker(ctx context.Context, db DB, key string) (BreakerResume, error) {
	var r BreakerResume
	err := db.QueryRow(ctx, outboxResumeBreakerSQL, key).Scan(&r.Reason, &r.TrippedAt, &r.ChangedAt, &r.Known, &r.Hard, &r.Complained)
	return r, err
}

// BreakerTrip is a run the breaker paused, and why.
type BreakerTrip struct{ Run, Reason string }

// BreakerTrips reads the trips the trigger sendonce_run_breaker noted in
// the transaction's setting sendonce.breaker_trips: a line "key TAB
// reason" each.
func BreakerTrips(noted string) []BreakerTrip {
	var out []BreakerTrip
	for line := range strings.Lines(noted) {
		run, reason, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if ok {
			out = append(out, BreakerTrip{Run: run, Reason: reason})
		}
	}
	return out
}
