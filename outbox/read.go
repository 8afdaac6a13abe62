package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Get returns the intent with the given key, or an error matching
// ErrNotFound.
func (o *Outbox) Get(ctx context.Context, key string) (*Record, error) {
	return get(ctx, o.pool, key)
}

func get(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (*Record, error) {
	rec, err := scanRecord(db.QueryRow(ctx, `SELECT `+columns+` FROM sendonce_outbox WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(err, key)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: get %q: %w", key, err)
	}
	return rec, nil
}

// ListParams filter and page a List.
type ListParams struct {
	// State keeps only intents in this state; empty keeps all.
	State State
	// AfterID pages: only intents with a larger id.
	AfterID int64
	// Limit caps the rows (default 100, at most 10,000).
	Limit int
}

// List returns intents in id order.
func (o *Outbox) List(ctx context.Context, p ListParams) ([]*Record, error) {
	if p.State != "" && !p.State.Valid() {
		return nil, fmt.Errorf("outbox: list: unknown state %q: want one of %v", p.State, States)
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 10_000)
	rows, err := o.pool.Query(ctx, `SELECT `+columns+` FROM sendonce_outbox
		WHERE ($1 = '' OR state = $1) AND id > $2 ORDER BY id LIMIT $3`, string(p.State), p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Record, error) { return scanRecord(r) })
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	return recs, nil
}

// Stats summarises the outbox for the status command and the metrics.
type Stats struct {
	// Counts holds the number of intents in each state (every state is
	// present, zero or not).
	Counts map[State]int64 `json:"counts"`
	// OldestPending is the age of the oldest intent that is due and not
	// yet sent (pending or sending), or zero when there is none.
	OldestPending time.Duration `json:"oldestPendingNanos"`
}

// Stats counts intents by state and ages the oldest due one.
func (o *Outbox) Stats(ctx context.Context) (*Stats, error) {
	db := o.pool
	st := &Stats{Counts: map[State]int64{}}
	for _, s := range States {
		st.Counts[s] = 0
	}
	rows, err := db.Query(ctx, `SELECT state, count(*) FROM sendonce_outbox GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	for rows.Next() {
		var s State
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("outbox: stats: %w", err)
		}
		st.Counts[s] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	var age float64
	err = db.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(greatest(created_at, coalesce(send_at, created_at)))), 0)
		FROM sendonce_outbox WHERE state IN ('pending', 'sending') AND coalesce(send_at, created_at) <= now()`).Scan(&age)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	st.OldestPending = time.Duration(age * float64(time.Second))
	return st, nil
}
