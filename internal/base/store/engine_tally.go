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

// selfTallied is the RETURNING item of a statement on the outbox that
// keeps the tallies itself (the drain's claim and its mark of sent
// intents): set for every row the statement changed, it tells the tally's
// statement trigger, whose WHEN reads and clears it as the statement's
// UPDATE ends, to stand aside for this statement alone (migration 00029).
// A statement that changed no row sets nothing, and the trigger runs as it
// always did, on empty transition tables.
const selfTallied = `set_config('sendonce.tallied', 'on', true)`
