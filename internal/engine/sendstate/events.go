package sendstate

import (
	"context"
	"fmt"

	"github.com/sendonce/sendonce/internal/base/store"
)

// matchBatch bounds the events one MatchEvents call matches.
const matchBatch = 1000

// MatchEvents matches the stored delivery events that came before their
// send was recorded (the API's webhook can beat the worker's record of the
// answer) to their intents, and applies their statuses; it returns how many
// it matched, and the runs whose breaker the statuses tripped (paused).
// The workers' sweeper calls it every second; with no unmatched event it
// reads one empty index page.
func MatchEvents(ctx context.Context, db DB) (int, []store.BreakerTrip, error) {
	var n int
	var trips []store.BreakerTrip
	err := captureStatus(ctx, db, func(db DB) error {
		var err error
		n, trips, err = store.MatchPendingEvents(ctx, db, matchBatch)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("sendstate: match pending events: %w", err)
	}
	return n, trips, nil
}
