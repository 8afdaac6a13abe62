package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/planguard"
)

// Get returns the intent with the given key, or an error matching
// ErrNotFound.
func (o *Outbox) Get(ctx context.Context, key string) (*Record, error) {
	return get(ctx, o.pool, key)
}

// Pruned returns what retention kept of a pruned intent (see
// Record.PrunedAt): a Record with its key, final state and PrunedAt only. It
// returns ErrNotFound when the key has no tombstone.
func (o *Outbox) Pruned(ctx context.Context, key string) (*Record, error) {
	rec := &Record{Key: key}
	var at time.Time
	err := o.pool.QueryRow(ctx, `SELECT state, pruned_at FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash($1)`, key).
		Scan(&rec.State, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(err, key)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: look up pruned %q: %w", key, err)
	}
	rec.PrunedAt = &at
	return rec, nil
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
	// Delivery keeps only intents with this delivery status; empty keeps
	// all.
	Delivery DeliveryStatus
	// Kind keeps only intents of this kind; empty keeps all.
	Kind Kind
	// KeyPrefix keeps only intents whose key starts with it, such as
	// "invoice:2026-11-"; empty keeps all.
	KeyPrefix string
	// Run keeps only the members of this run; empty keeps all.
	Run string
	// CreatedFrom and CreatedBefore, when not zero, keep only intents
	// enqueued at or after CreatedFrom and before CreatedBefore.
	CreatedFrom, CreatedBefore time.Time
	// AfterID pages: only intents with a larger id.
	AfterID int64
	// Newest lists the newest intents first (descending id) instead of the
	// oldest; BeforeID pages it.
	Newest bool
	// BeforeID, when positive, keeps only intents with a smaller id: the
	// next page of a Newest list.
	BeforeID int64
	// Limit caps the rows (default 100, at most 10,000).
	Limit int
}

// List returns intents in id order, or newest first with p.Newest; nil p
// lists the first 100.
func (o *Outbox) List(ctx context.Context, params *ListParams) ([]*Record, error) {
	var p ListParams
	if params != nil {
		p = *params
	}
	if p.State != "" && !p.State.Valid() {
		return nil, fmt.Errorf("outbox: list: unknown state %q: want one of %v", p.State, States)
	}
	if p.Delivery != "" && !p.Delivery.Valid() {
		return nil, fmt.Errorf("outbox: list: unknown delivery status %q: want one of %v", p.Delivery, DeliveryStatuses)
	}
	if p.Kind != "" && !p.Kind.Valid() {
		return nil, fmt.Errorf("outbox: list: unknown kind %q: want email, batch, template or broadcast", p.Kind)
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 10_000)
	var from, before *time.Time
	if !p.CreatedFrom.IsZero() {
		from = &p.CreatedFrom
	}
	if !p.CreatedBefore.IsZero() {
		before = &p.CreatedBefore
	}
	// Two orders, each a walk of the primary key's index, not a sort.
	order := "ASC"
	if p.Newest {
		order = "DESC"
	}
	// starts_with, not LIKE: "_" is a key character and a LIKE wildcard.
	rows, err := o.pool.Query(ctx, `SELECT `+columns+` FROM sendonce_outbox
		WHERE ($1 = '' OR state = $1) AND ($4 = '' OR delivery_status = $4) AND id > $2
			AND ($5 = '' OR kind = $5) AND ($6 = '' OR starts_with(idempotency_key, $6))
			AND ($7::timestamptz IS NULL OR created_at >= $7) AND ($8::timestamptz IS NULL OR created_at < $8)
			AND ($9 = '' OR run_key = $9) AND ($10 = 0 OR id < $10)
		ORDER BY id `+order+` LIMIT $3`,
		string(p.State), p.AfterID, p.Limit, string(p.Delivery), string(p.Kind), p.KeyPrefix, from, before, p.Run,
		p.BeforeID)
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
	// Deliveries holds the number of intents with each delivery status
	// (every status is present, zero or not); intents with none are not
	// counted.
	Deliveries map[DeliveryStatus]int64 `json:"deliveries"`
	// OldestPending is the age of the oldest intent that is due and not
	// yet sent (pending or sending), or zero when there is none.
	OldestPending time.Duration `json:"oldestPendingNanos"`
}

// Stats counts intents by state and by delivery status, and ages the
// oldest due one.
func (o *Outbox) Stats(ctx context.Context) (*Stats, error) {
	db := o.pool
	st := &Stats{Counts: map[State]int64{}, Deliveries: map[DeliveryStatus]int64{}}
	for _, s := range States {
		st.Counts[s] = 0
	}
	for _, d := range DeliveryStatuses {
		st.Deliveries[d] = 0
	}
	// Both counts from the tally the outbox's triggers keep (see
	// migration 00022): exact, as a count(*) of the table would be, at the
	// cost of summing its few rows, whatever the table's size. The tally
	// counts pending and sending intents together, as pending (migration
	// 00028: the drain's claim appends nothing); the sending ones, few,
	// are counted from the table in the same statement, so as of the same
	// snapshot, and taken from them. The sending ones and the oldest due
	// one are read through the partial index of unsettled intents,
	// whatever the statistics say: taken while a large run was pending,
	// they make a scan of the whole table look cheaper (see planguard.Run).
	var sending int64
	var age float64
	err := planguard.Run(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT state, delivery_status, sum(n)::bigint, false FROM sendonce_outbox_tally GROUP BY 1, 2
			UNION ALL
			SELECT 'sending', '', count(*), true FROM sendonce_outbox WHERE state = 'sending'`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s State
			var d DeliveryStatus
			var n int64
			var live bool
			if err := rows.Scan(&s, &d, &n, &live); err != nil {
				return err
			}
			switch {
			case live:
				sending = n
			case s == StateSending:
				st.Counts[StatePending] += n
			default:
				st.Counts[s] += n
			}
			if d != "" {
				st.Deliveries[d] += n
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(greatest(created_at, coalesce(send_at, created_at)))), 0)
			FROM sendonce_outbox WHERE state IN ('pending', 'sending') AND coalesce(send_at, created_at) <= now()`).Scan(&age)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	st.Counts[StatePending] -= sending
	st.Counts[StateSending] = sending
	st.OldestPending = time.Duration(age * float64(time.Second))
	return st, nil
}
