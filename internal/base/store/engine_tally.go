package store

import "context"

// compactTallySQL is CompactTally's statement.
const compactTallySQL = `SELECT sendonce_tally_compact()`

// CompactTally folds the deltas that the outbox's triggers append to its
// tallies (sendonce_outbox_tally, sendonce_run_tally; see migration 00022)
// into one row per group (sendonce_tally_compact), and returns how many
// rows it folded.
func CompactTally(ctx context.Context, db DB) (int, error) {
	var n int
	err := db.QueryRow(ctx, compactTallySQL).Scan(&n)
	return n, err
}
