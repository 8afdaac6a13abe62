package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/base/status"
)

// DefaultQueue is the queue intents go on unless configured: the River
// queue whose workers' drains send them.
const DefaultQueue = "sendonce"

// Config tunes an Outbox. The zero value is ready to use.
type Config struct {
	// Queue is the queue the intents go on (default DefaultQueue): the
	// workers of that River queue (worker.Config.Queue) drain them.
	Queue string
	// OnStatus, when set, is told of the transitions this Outbox records
	// (an intent canceled, a run's members canceled) in the transaction
	// that records them, before it commits (see StatusHook); an error
	// from it rolls the operation back and is returned.
	OnStatus StatusHook
	// Logger takes the warnings of operations on runs (a run resumed
	// after its breaker paused it, its settings unchanged); nil:
	// slog.Default().
	Logger *slog.Logger
}

// Outbox enqueues and reads send intents. It is safe for concurrent use.
type Outbox struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	queue  string
	hook   StatusHook
	logger *slog.Logger
}

// New returns an Outbox over the application's database. Nothing is
// started. Its insert-only River client of its own gives new River jobs to
// what an operator retries with its batch, and cancels the River job of an
// intent from a release before the drain.
func New(pool *pgxpool.Pool, cfg *Config) (*Outbox, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	queue := cfg.Queue
	if queue == "" {
		queue = DefaultQueue
	}
	// The shortest cooldown: a batch retried by hand is announced to the
	// workers at once.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: river.FetchCooldownMin})
	if err != nil {
		return nil, fmt.Errorf("outbox: river client: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Outbox{pool: pool, river: rc, queue: queue, hook: cfg.OnStatus, logger: logger}, nil
}

// inTx runs fn in a transaction of its own on the pool.
// With a status hook, the transitions fn's statements record are
// captured (store.CaptureStatuses) and told to it before the commit.
func (o *Outbox) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if o.hook == nil {
		return pgx.BeginFunc(ctx, o.pool, fn)
	}
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		statuses, err := status.Capture(ctx, tx, func() error { return fn(tx) })
		if err != nil || len(statuses) == 0 {
			return err
		}
		if err := o.hook(ctx, tx, statuses); err != nil {
			return fmt.Errorf("status hook: %w", err)
		}
		return nil
	})
}

func notFound(err error, key string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return err
}
