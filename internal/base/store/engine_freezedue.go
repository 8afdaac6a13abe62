package store

import (
	"context"
	"time"
)

// The coalescer of the drain's intents (internal/engine/sendstate's
// Batcher.FreezeDue): the read of the intents it may gather, and the lock
// its freezes of one group take turns on. Each batch is frozen with
// SelectFreezeMembers and InsertBatch (engine_batch.go).

// DueCandidate is an intent FreezeDue may gather: its key, its run (""
// for none), and how long until its coalesce wait has passed (zero or
// less: it has).
type DueCandidate struct {
	Key    string
	RunKey string
	Tenant string // "" for the default tenant
	Left   time.Duration
}

// unlimitedTenantSQL is the SQL condition that the tenant of the outbox
// row aliased o has no limits (no rate, no quota: sendonce_tenant). The
// intents of a tenant with limits are not coalesced: a batch is claimed
// and sent whole, by its own job, past the fair claim that holds each
// tenant to its limits and spends them (ClaimDueShares), so they go one
// by one through that claim.
const unlimitedTenantSQL = `NOT EXISTS (SELECT 1 FROM sendonce_tenant t WHERE t.name = ` + tenantSQL + ` AND ` + limitedSQL + `)`

// dueForBatchSQL is SelectDueForBatch's statement.
var dueForBatchSQL = `SELECT o.idempotency_key, coalesce(o.run_key, ''), ` + tenantSQL + `,
			extract(epoch FROM ` + dueSQL + ` + $3::float8 * interval '1 second' - now())::float8
		FROM sendonce_outbox o
		WHERE o.state = 'pending' AND o.job_id IS NULL AND ` + dueSQL + ` <= now() AND o.queue = $1
			AND o.kind = 'email' AND o.attempts = 0 AND o.batch_key IS NULL AND (o.topic IS NULL OR $4)
			AND ` + notPausedSQL + ` AND ` + unlimitedTenantSQL + `
		ORDER BY ` + dueOrderSQL + `
		LIMIT $2`

// SelectDueForBatch reads, in the due index's order (class, tenant, due
// time), up to limit intents
// ClaimDueIntents would claim (pending, without a River job, due, of
// queue, not of a paused run) that may join a batch (email, never
// attempted, in no batch, with a topic only when topics, of a tenant
// without limits: unlimitedTenantSQL), each with how
// long until wait has passed since it came due. It locks nothing.
func SelectDueForBatch(ctx context.Context, db DB, queue string, limit int, wait time.Duration, topics bool) ([]DueCandidate, error) {
	rows, err := db.Query(ctx, dueForBatchSQL, queue, limit, wait.Seconds(), topics)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueCandidate
	for rows.Next() {
		var c DueCandidate
		var left float64
		if err := rows.Scan(&c.Key, &c.RunKey, &c.Tenant, &left); err != nil {
			return nil, err
		}
		c.Left = engineSeconds(left)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// lockFreezeGroupSQL is LockFreezeGroup's statement.
const lockFreezeGroupSQL = `SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text || '/' || $3::text))`

// LockFreezeGroup takes, for the rest of the transaction, the advisory
// lock (class, a hash of queue and run) on which the freezes of one group
// take turns across the fleet (pg_advisory_xact_lock: it waits).
func LockFreezeGroup(ctx context.Context, db DB, class int32, queue, run string) error {
	_, err := db.Exec(ctx, lockFreezeGroupSQL,
		class, queue, run)
	return err
}
