package store

import "context"

// matchPendingEventsSQL is MatchPendingEvents's statement; it reads the
// runs the breaker paused in its transaction after the match.
const matchPendingEventsSQL = `SELECT n, coalesce(current_setting('sendonce.breaker_trips', true), '')
		FROM sendonce_events_match_pending($1) AS n`

// MatchPendingEvents matches up to limit stored delivery events that came
// before their send was recorded to their intents, and applies their
// statuses (sendonce_events_match_pending); it returns how many it
// matched, and the runs the breaker paused meanwhile (see BreakerTrips).
func MatchPendingEvents(ctx context.Context, db DB, limit int) (int, []BreakerTrip, error) {
	var n int
	var noted string
	err := db.QueryRow(ctx, matchPendingEventsSQL, limit).Scan(&n, &noted)
	return n, BreakerTrips(noted), err
}
