package sendstate

import (
	"context"
	"fmt"

	"github.com/sendonce/sendonce/internal/base/store"
)

// CompactTally folds the deltas that the outbox's triggers append to its
// tallies (sendonce_outbox_tally, sendonce_run_tally; see migration 00022)
// into one row per group, and returns how many rows it folded. Reads of the
// counts sum the tallies' rows, so compacting keeps them a few hundred rows
// whatever the outbox's size or rate. Any number of callers may compact at
// once; a fold never blocks a writer.
func CompactTally(ctx context.Context, db DB) (int, error) {
	n, err := store.CompactTally(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("sendstate: compact tally: %w", err)
	}
	return n, nil
}
