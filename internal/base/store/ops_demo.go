package store

import "context"

// The reads of `sendonce demo` (cmd/internal/ops/demo) on sendonce_* and
// river_* tables: the operator's and the report's side of the run, scoped
// to the run's keys (they start with a prefix of the run's own). The
// demo's application side writes its intents through package outbox, and
// its own table (demo_invoices) is not sendonce's.

// DemoCounts are a demo run's intents by outcome.
type DemoCounts struct {
	Sent     int // state sent
	Settled  int // sent, failed, canceled or suppressed: no worker will touch it again
	Sending  int // claimed by a worker (or left so by a dead one)
	Replayed int // sent, and the API's answer was a replay
}

// demoCountsSQL counts the intents whose keys start with $1 by outcome.
const demoCountsSQL = `SELECT
			count(*) FILTER (WHERE state = 'sent'),
			count(*) FILTER (WHERE state IN ('sent', 'failed', 'canceled', 'suppressed')),
			count(*) FILTER (WHERE state = 'sending'),
			count(*) FILTER (WHERE replayed)
		FROM sendonce_outbox WHERE starts_with(idempotency_key, $1)`

// DemoReadCounts counts the intents whose keys start with keyPrefix by
// outcome. The error is the statement's, unwrapped.
func DemoReadCounts(ctx context.Context, db DB, keyPrefix string) (DemoCounts, error) {
	var c DemoCounts
	err := db.QueryRow(ctx, demoCountsSQL, keyPrefix).Scan(&c.Sent, &c.Settled, &c.Sending, &c.Replayed)
	return c, err
}

// demoIntentsSQL counts the intents whose keys start with $1.
const demoIntentsSQL = `SELECT count(*) FROM sendonce_outbox WHERE starts_with(idempotency_key, $1)`

// DemoCountIntents counts the intents whose keys start with keyPrefix.
// The error is the statement's, unwrapped.
func DemoCountIntents(ctx context.Context, db DB, keyPrefix string) (int, error) {
	var n int
	err := db.QueryRow(ctx, demoIntentsSQL, keyPrefix).Scan(&n)
	return n, err
}

// demoBouncedSQL counts the intents whose keys start with $1 and whose
// delivery status is bounced.
const demoBouncedSQL = `SELECT count(*) FROM sendonce_outbox
		WHERE starts_with(idempotency_key, $1) AND delivery_status = 'bounced'`

// DemoCountBounced counts the intents whose keys start with keyPrefix that
// bounced. The error is the statement's, unwrapped.
func DemoCountBounced(ctx context.Context, db DB, keyPrefix string) (int, error) {
	var n int
	err := db.QueryRow(ctx, demoBouncedSQL, keyPrefix).Scan(&n)
	return n, err
}

// demoWaitingSQL counts the pending intents with no River job of their
// own on queue $1: those the drains of that queue's workers would claim.
const demoWaitingSQL = `SELECT count(*) FROM sendonce_outbox WHERE job_id IS NULL AND state = 'pending' AND queue = $1`

// DemoCountWaiting counts the pending intents with no River job of their
// own on queue, which its workers' drains would claim. The error is the
// statement's, unwrapped.
func DemoCountWaiting(ctx context.Context, db DB, queue string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, demoWaitingSQL, queue).Scan(&n)
	return n, err
}

// demoRiverLeadersSQL counts River's leaders whose term has not expired.
const demoRiverLeadersSQL = `SELECT count(*) FROM river_leader WHERE expires_at > now()`

// DemoCountRiverLeaders counts the River leaders of the database whose term
// has not expired: another River client leads it. The error is the
// statement's, unwrapped.
func DemoCountRiverLeaders(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, demoRiverLeadersSQL).Scan(&n)
	return n, err
}

// demoUnsentSQL reads which of the keys $1 are intents not marked sent, in
// the order they were enqueued.
const demoUnsentSQL = `SELECT idempotency_key FROM sendonce_outbox
		WHERE idempotency_key = ANY($1) AND state <> 'sent' ORDER BY id`

// DemoUnsent returns those of keys whose intents are not marked sent, in
// the order they were enqueued. The error is the statement's, unwrapped.
func DemoUnsent(ctx context.Context, db DB, keys []string) ([]string, error) {
	rows, err := db.Query(ctx, demoUnsentSQL, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// demoSuppressedSQL says whether an address is on the suppression list.
const demoSuppressedSQL = `SELECT EXISTS (SELECT FROM sendonce_suppression WHERE address = lower($1))`

// DemoSuppressed reports whether addr is on the suppression list. The
// error is the statement's, unwrapped.
func DemoSuppressed(ctx context.Context, db DB, addr string) (bool, error) {
	var on bool
	err := db.QueryRow(ctx, demoSuppressedSQL, addr).Scan(&on)
	return on, err
}
