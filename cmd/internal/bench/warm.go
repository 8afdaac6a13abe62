package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/worker"
)

// warmIntents is how many intents WarmBudget drains: enough for slow start
// to take the fleet's rate past every rate a benchmark row reaches (a
// worker of 100 sends draining them doubles it every tenth of a second
// above 100/s).
const warmIntents = 3000

// WarmBudget lets the send budget of the benchmark's API key find its rate,
// as the budget of a fleet that has been running has: a worker with its
// defaults drains warmIntents intents from a backlog against a fake API of
// its own (no added latency, so no 429), and slow start doubles the
// fleet's rate while the fleet uses it all. Then the outbox and River's
// jobs are emptied, and the budget's row is kept. It returns the rate the
// budget found.
//
// The rows that time a worker's sends start from it. From a new API key
// each of them paid slow start's ramp in its first seconds (10/s, doubling
// every half second below 100/s: about 2.5 s to reach 1,000/s), which is
// how a fleet begins once per API key, not how it runs; the end-to-end
// scenario measures that beginning in a row of its own.
func (e *Env) WarmBudget(ctx context.Context) (rate float64, err error) {
	fake, err := StartFake(0, worker.DefaultConcurrency)
	if err != nil {
		return 0, err
	}
	defer fake.Close()
	pool, ob, err := e.NewOutbox(ctx, e.PoolConns)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if err := EnqueueBatches(ctx, pool, ob, Intents("warm", warmIntents), 1000); err != nil {
		return 0, err
	}
	if _, err := drainQueued(ctx, e, pool, fake, DrainParams{N: warmIntents, Timeout: time.Minute}); err != nil {
		return 0, fmt.Errorf("bench: warm the budget: %w", err)
	}
	if _, err := e.Admin.Exec(ctx, "TRUNCATE sendonce_outbox, river_job RESTART IDENTITY"); err != nil {
		return 0, fmt.Errorf("bench: empty the tables after the warm-up: %w", err)
	}
	if err := e.Admin.QueryRow(ctx, "SELECT coalesce(max(rate), 0) FROM sendonce_rate_budget").Scan(&rate); err != nil {
		return 0, fmt.Errorf("bench: read the warmed budget: %w", err)
	}
	return rate, e.Checkpoint(ctx)
}
