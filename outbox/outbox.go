package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// DefaultQueue is the River queue intents' jobs go to unless configured.
const DefaultQueue = "sendonce"

// Config tunes an Outbox. The zero value is ready to use.
type Config struct {
	// Queue is the River queue for send jobs (default DefaultQueue). Workers
	// must work the same queue.
	Queue string
}

// Outbox enqueues and reads send intents. It is safe for concurrent use.
type Outbox struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	queue string
}

// New returns an Outbox over the application's database. It inserts River
// jobs through an insert-only River client of its own; nothing is started.
func New(pool *pgxpool.Pool, cfg *Config) (*Outbox, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	queue := cfg.Queue
	if queue == "" {
		queue = DefaultQueue
	}
	// An insert-only client announces inserted jobs to the workers with
	// pg_notify, at most once per FetchCooldown per queue (100 ms by
	// default); jobs inserted in between wait for the workers' next fetch.
	// The shortest cooldown keeps commit-to-send latency low.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: river.FetchCooldownMin})
	if err != nil {
		return nil, fmt.Errorf("outbox: river client: %w", err)
	}
	return &Outbox{pool: pool, river: rc, queue: queue}, nil
}

// inTx runs fn in a transaction of its own on the pool.
func (o *Outbox) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, o.pool, fn)
}

func notFound(err error, key string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return err
}
