package store

import "context"

// matchPendingEventsSQL is MatchPendingEvents's statement.
const matchPendingEventsSQL = `SELECT sendonce_events_match_pending($1)`

// MatchPendingEvents matches up to limit stored delivery events that came
// before their send was recorded to their intents, and applies their
// statuses (sendonce_events_match_pending); it returns how many it
// matched.
func MatchPendingEvents(ctx context.Context, db DB, limit int) (int, error) {
	var n int
	err := db.QueryRow(ctx, matchPendingEventsSQL, limit).Scan(&n)
	return n, err
}
