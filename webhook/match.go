package webhook

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MatchBatch bounds the events one MatchPending call matches.
const MatchBatch = 1000

// DB is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// MatchPending matches the stored events that came before their send was
// recorded (the API's webhook can beat the worker's record of the answer)
// to their intents, and applies their statuses; it returns how many it
// matched. The workers' sweeper calls it every second; with no unmatched
// event it reads one empty index page.
func MatchPending(ctx context.Context, db DB) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT sendonce_events_match_pending($1)`, MatchBatch).Scan(&n); err != nil {
		return 0, fmt.Errorf("webhook: match pending events: %w", err)
	}
	return n, nil
}
