package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/base/store"
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
	state, at, err := store.ReadTombstone(ctx, o.pool, key)
	rec := &Record{Key: key, State: State(state)}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(err, key)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: look up pruned %q: %w", key, err)
	}
	rec.PrunedAt = &at
	return rec, nil
}

func get(ctx context.Context, db store.DB, key string) (*Record, error) {
	rec, err := recordOf(store.GetIntent(ctx, db, key))
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
	// Tenant keeps only the intents of this tenant (DefaultTenant: those
	// that name none); empty keeps all.
	Tenant string
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
	var tenant *string
	switch {
	case p.Tenant == DefaultTenant:
		tenant = new(string)
	case p.Tenant != "":
		if err := ValidateTenant(p.Tenant); err != nil {
			return nil, err
		}
		tenant = &p.Tenant
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
	// Two orders, each a walk of the primary key's index, not a sort (see
	// store.ListIntents).
	rows, err := store.ListIntents(ctx, o.pool, &store.IntentFilter{State: string(p.State), Delivery: string(p.Delivery),
		Kind: string(p.Kind), KeyPrefix: p.KeyPrefix, Run: p.Run, Tenant: tenant, CreatedFrom: from, CreatedBefore: before,
		AfterID: p.AfterID, BeforeID: p.BeforeID, Newest: p.Newest, Limit: p.Limit})
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	recs := make([]*Record, len(rows))
	for i, in := range rows {
		recs[i] = record(in)
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
		err := store.IntentTally(ctx, tx, func(state, delivery string, n int64, live bool) {
			s, d := State(state), DeliveryStatus(delivery)
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
		})
		if err != nil {
			return err
		}
		age, err = store.OldestDueAge(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	st.Counts[StatePending] -= sending
	st.Counts[StateSending] = sending
	st.OldestPending = time.Duration(age * float64(time.Second))
	return st, nil
}
