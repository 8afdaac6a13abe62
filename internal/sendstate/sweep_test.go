package sendstate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// holdLock takes an advisory lock on a session of its own in pool's
// database, as a live worker does, and keeps it until the test ends.
func holdLock(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// Hole 12 (issue 22): worker ids come from a per-database sequence, so
// worker 7 of one database and worker 7 of another on the same server hold
// the same advisory lock key, each in its own database. The rescue read
// pg_locks across the server: a live worker 7 elsewhere made a dead worker
// 7 here look alive, and its intents waited for River's rescuer (minutes)
// instead of the next sweep. Only a lock held in this database, in
// sendonce's key space (OwnerLockClass, id: two int4 keys, objsubid 2),
// proves the owner alive.
func TestRescueIgnoresLocksOfOtherDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const id = 7
	// Database xa: worker 7 is alive and has an intent sending.
	poolA, _, jobsA := setup(t, "xa:live")
	holdLock(t, poolA, `SELECT pg_advisory_lock($1, $2)`, sendstate.OwnerLockClass, int32(id))
	// Database xb on the same server: its own worker 7 claimed an intent
	// and died; nothing holds (OwnerLockClass, 7) in xb. An application
	// lock that merely has the same bits in another key space (one bigint
	// key: objsubid 1) proves nothing either.
	poolB, _, jobsB := setup(t, "xb:dead")
	holdLock(t, poolB, `SELECT pg_advisory_lock($1::bigint)`, int64(sendstate.OwnerLockClass)<<32|id)
	opts := claimOpts
	opts.Owner = id
	for _, c := range []struct {
		pool *pgxpool.Pool
		key  string
	}{{poolA, "xa:live"}, {poolB, "xb:dead"}} {
		if _, ok, err := sendstate.Claim(ctx, c.pool, request(t, c.pool, c.key), opts); err != nil || !ok {
			t.Fatalf("claim %s: %v, %v", c.key, ok, err)
		}
	}
	for _, p := range []*pgxpool.Pool{poolA, poolB} {
		if _, err := p.Exec(ctx, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, state, claimed_by)
			VALUES ('batch:1', $1, '{"emails":[]}', ARRAY['m:1'], 'sending', $2)`, outbox.DefaultQueue, id); err != nil {
			t.Fatal(err)
		}
	}

	if n, err := jobsB.RescueAbandoned(ctx, 0); err != nil || n != 1 {
		t.Errorf("xb: RescueAbandoned = %d, %v; want 1: its worker %d is dead, whatever worker %d of xa does", n, err, id, id)
	}
	if n, err := jobsB.RescueAbandonedBatches(ctx, 0); err != nil || n != 1 {
		t.Errorf("xb: RescueAbandonedBatches = %d, %v; want 1", n, err)
	}
	if n, err := jobsA.RescueAbandoned(ctx, 0); err != nil || n != 0 {
		t.Errorf("xa: RescueAbandoned = %d, %v; want 0: its worker %d is alive", n, err, id)
	}
	if n, err := jobsA.RescueAbandonedBatches(ctx, 0); err != nil || n != 0 {
		t.Errorf("xa: RescueAbandonedBatches = %d, %v; want 0", n, err)
	}
}
