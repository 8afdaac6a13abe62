package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The checks of an enqueue in a REPEATABLE READ or SERIALIZABLE
// transaction (issue 22; see outbox's enqueue_snapshot.go for why).
//
// outboxSnapshotLockSQL fails with a serialization failure for keys whose
// row the snapshot still saw (seen in outboxInsertSQL): under these
// levels, a locking read of a row that a transaction the snapshot does not
// show deleted is a serialization failure ("could not serialize access due
// to concurrent update"). Such a row is always gone: one still there would
// have kept the insert out. (A row deleted by hand rather than pruned
// fails so too: the snapshot shows a key that is no longer there.)
const outboxSnapshotLockSQL = `SELECT 1 FROM sendonce_outbox WHERE idempotency_key = ANY($1) AND id <> ALL($2) FOR KEY SHARE`

// outboxProbeSQL and outboxUnprobeSQL find tombstones the snapshot does
// not show even when the snapshot predates the pruned intent itself (and so
// saw no row under its key). A unique index sees every committed row: an
// insert that conflicts with one the snapshot cannot see fails with "could
// not serialize access due to concurrent update". So a probe row goes into
// the tombstones for each key inserted, ON CONFLICT DO NOTHING, and is
// deleted again by the next statement; it is never committed. (A conflict
// with a tombstone the snapshot shows is impossible here: outboxInsertSQL
// leaves such keys out.) A prune cannot wait for a probe row: it writes the
// tombstones of the rows it deletes, and a key inserted here has no other
// row.
const (
	outboxProbeSQL = `INSERT INTO sendonce_tombstone (key_hash, intent_hash, state)
		SELECT sendonce_key_hash(k), '\x'::bytea, 'probe' FROM unnest($1::text[]) AS k
		ON CONFLICT (key_hash) DO NOTHING`
	outboxUnprobeSQL = `DELETE FROM sendonce_tombstone
		WHERE key_hash IN (SELECT sendonce_key_hash(k) FROM unnest($1::text[]) AS k) AND state = 'probe'`
)

// CheckSnapshot runs the snapshot's checks for the keys a call inserted
// (keys, sorted; ids, their rows' ids) and the keys of those whose
// statement saw a row under the key (seen; the lock runs only when there
// are some): in one round trip, a pgx.Batch on tx, when batches is set;
// otherwise one statement at a time, through tx.Exec (behind a pooler
// whose pool names prepared statements). It returns the first error,
// unwrapped: a serialization failure (SQLSTATE 40001) when a key was
// pruned after the transaction's snapshot was taken.
func CheckSnapshot(ctx context.Context, tx pgx.Tx, batches bool, keys []string, ids []int64, seen []string) error {
	b := &pgx.Batch{}
	if len(seen) > 0 {
		b.Queue(outboxSnapshotLockSQL, seen, ids)
	}
	b.Queue(outboxProbeSQL, keys)
	b.Queue(outboxUnprobeSQL, keys)
	var err error
	if batches {
		err = tx.SendBatch(ctx, b).Close()
	} else {
		for _, q := range b.QueuedQueries {
			if _, err = tx.Exec(ctx, q.SQL, q.Arguments...); err != nil {
				break
			}
		}
	}
	return err
}
