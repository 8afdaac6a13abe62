package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// outboxGetSQL reads the intent with key $1.
const outboxGetSQL = `SELECT ` + IntentColumns + ` FROM sendonce_outbox WHERE idempotency_key = $1`

// GetIntent reads the intent with key key (a whole row). Its error is
// pgx.ErrNoRows when there is none, and the database's otherwise,
// unwrapped.
func GetIntent(ctx context.Context, db DB, key string) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, outboxGetSQL, key))
}

// outboxTombstoneSQL reads what retention kept of the intent with key $1.
const outboxTombstoneSQL = `SELECT state, pruned_at FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash($1)`

// ReadTombstone reads what retention kept of a pruned intent: its final state
// and when it was pruned. Its error is pgx.ErrNoRows when the key has no
// tombstone, and the database's otherwise, unwrapped.
func ReadTombstone(ctx context.Context, db DB, key string) (state string, prunedAt time.Time, _ error) {
	err := db.QueryRow(ctx, outboxTombstoneSQL, key).Scan(&state, &prunedAt)
	return state, prunedAt, err
}

// IntentFilter selects the intents ListIntents returns: the zero value of
// a field keeps all.
type IntentFilter struct {
	State, Delivery, Kind string
	// KeyPrefix keeps the keys that start with it.
	KeyPrefix string
	// Run keeps the members of the run with this key.
	Run string
	// Tenant, when not nil, keeps the intents of this tenant ("": the
	// default tenant, NULL).
	Tenant *string
	// CreatedFrom and CreatedBefore, when not nil, bound created_at.
	CreatedFrom, CreatedBefore *time.Time
	// AfterID keeps ids above it; BeforeID, when positive, ids below it.
	AfterID, BeforeID int64
	// Newest lists by descending id instead of ascending.
	Newest bool
	// Limit caps the rows.
	Limit int
}

// outboxListSQL is the statement of ListIntents in order ("ASC" or
// "DESC"): two statements, each a walk of the primary key's index, not a
// sort. starts_with, not LIKE: "_" is a key character and a LIKE wildcard.
func outboxListSQL(order string) string {
	return `SELECT ` + IntentColumns + ` FROM sendonce_outbox
		WHERE ($1 = '' OR state = $1) AND ($4 = '' OR delivery_status = $4) AND id > $2
			AND ($5 = '' OR kind = $5) AND ($6 = '' OR starts_with(idempotency_key, $6))
			AND ($7::timestamptz IS NULL OR created_at >= $7) AND ($8::timestamptz IS NULL OR created_at < $8)
			AND ($9 = '' OR run_key = $9) AND ($10 = 0 OR id < $10)
			AND ($11::text IS NULL OR coalesce(tenant, '') = $11)
		ORDER BY id ` + order + ` LIMIT $3`
}

// ListIntents returns the intents f selects (whole rows), in id order or
// newest first. The error is the database's, unwrapped.
func ListIntents(ctx context.Context, db DB, f *IntentFilter) ([]*Intent, error) {
	order := "ASC"
	if f.Newest {
		order = "DESC"
	}
	rows, err := db.Query(ctx, outboxListSQL(order),
		f.State, f.AfterID, f.Limit, f.Delivery, f.Kind, f.KeyPrefix, f.CreatedFrom, f.CreatedBefore, f.Run,
		f.BeforeID, f.Tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Intent, error) { return ScanIntent(r) })
}

// outboxTallySQL counts the intents by state and delivery status from the
// tally the outbox's triggers keep (see migration 00022): exact, as a
// count(*) of the table would be, at the cost of summing its few rows,
// whatever the table's size. The tally counts pending and sending intents
// together, as pending (migration 00028: the drain's claim appends
// nothing); the sending ones, few, are counted from the table in the same
// statement (live: true), so as of the same snapshot, for the caller to
// take from them.
const outboxTallySQL = `SELECT state, delivery_status, sum(n)::bigint, false FROM sendonce_outbox_tally GROUP BY 1, 2
			UNION ALL
			SELECT 'sending', '', count(*), true FROM sendonce_outbox WHERE state = 'sending'`

// outboxOldestDueSQL ages the oldest due intent not yet sent, in seconds.
const outboxOldestDueSQL = `SELECT coalesce(extract(epoch FROM now() - min(greatest(created_at, coalesce(send_at, created_at)))), 0)
			FROM sendonce_outbox WHERE state IN ('pending', 'sending') AND coalesce(send_at, created_at) <= now()`

// IntentTally calls each with every row of the outbox's tally, summed by
// state and delivery status (live false; the tally counts sending intents
// as pending), and with the number of sending intents counted from the
// table (state "sending", live true), as of one snapshot. Read it in a
// planguard.Run transaction: the sending ones are read through the partial
// index of unsettled intents. The error is the database's, unwrapped.
func IntentTally(ctx context.Context, db DB, each func(state, delivery string, n int64, live bool)) error {
	rows, err := db.Query(ctx, outboxTallySQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s, d string
		var n int64
		var live bool
		if err := rows.Scan(&s, &d, &n, &live); err != nil {
			return err
		}
		each(s, d, n, live)
	}
	return rows.Err()
}

// OldestDueAge is the age in seconds of the oldest intent that is due and
// not yet sent (pending or sending), 0 when there is none. Read it in a
// planguard.Run transaction, as IntentTally.
func OldestDueAge(ctx context.Context, db DB) (float64, error) {
	var age float64
	err := db.QueryRow(ctx, outboxOldestDueSQL).Scan(&age)
	return age, err
}
