package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/internal/base/store"
)

// Enqueueing in a REPEATABLE READ or SERIALIZABLE transaction (issue 22).
// Such a transaction reads one snapshot, taken at its first statement,
// throughout. A prune of a key that commits after the snapshot deletes the
// key's row and writes its tombstone, and neither is in the snapshot: the
// check of the tombstones in insertSQL passes, the unique index no longer
// holds the old row, and the insert went in, a second send of the key.
// Under READ COMMITTED, raced looks again in a new snapshot; here no later
// statement sees more, so the insert fails with a serialization failure
// (SQLSTATE 40001), which a REPEATABLE READ or SERIALIZABLE producer
// retries anyway (PostgreSQL fails such transactions for many other
// conflicts). The retry's new snapshot sees the tombstone, and insertSQL
// answers the key from it as ever. The failure comes from the database,
// which aborts the transaction, so nothing of the call (nor of anything
// else the transaction wrote) can commit.
//
// The checks are package store's (store.CheckSnapshot, in
// store/outbox_snapshot.go, with the comments that explain them):
// snapshotLockSQL fails so for keys whose row the snapshot still saw (seen
// in insertSQL), and probeSQL and unprobeSQL find tombstones the snapshot
// does not show even when the snapshot predates the pruned intent itself.

// snapshotCheck fails the call with a serialization failure when a key it
// inserted was pruned after the transaction's snapshot was taken (see
// above). It costs a REPEATABLE READ or SERIALIZABLE transaction one round
// trip per call that inserts (behind a pooler whose pool names prepared
// statements, one per statement: two or three; see producerTx); READ
// COMMITTED never runs it.
func snapshotCheck(ctx context.Context, tx producerTx, inserted map[string]*Record, seen []string) error {
	if len(inserted) == 0 {
		return nil
	}
	keys := make([]string, 0, len(inserted))
	ids := make([]int64, 0, len(inserted))
	for k, rec := range inserted {
		keys, ids = append(keys, k), append(ids, rec.ID)
	}
	slices.Sort(keys)
	err := store.CheckSnapshot(ctx, tx, tx.batches, keys, ids, seen)
	if err != nil {
		if !isSerializationFailure(err) {
			return fmt.Errorf("outbox: look up keys pruned since the transaction's snapshot: %w", err)
		}
		if len(seen) > 0 {
			keys = seen
		}
		return snapshotError(keys, err)
	}
	return nil
}

// serializationFailure is SQLSTATE 40001.
const serializationFailure = "40001"

func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == serializationFailure
}

// snapshotError says what a serialization failure of an enqueue means and
// what to do. insertSQL fails so by itself when a key's row is there but
// not in the snapshot (enqueued, or rewritten by a worker's claim or mark,
// after it was taken): PostgreSQL refuses ON CONFLICT DO NOTHING against a
// row the snapshot cannot see. The error wraps the database's, so that
// errors.As finds the *pgconn.PgError with its SQLSTATE 40001, which retry
// loops look for.
func snapshotError(keys []string, err error) error {
	return fmt.Errorf("outbox: %s was enqueued, sent or pruned by a transaction that committed after this transaction's snapshot was taken (REPEATABLE READ or SERIALIZABLE): roll back and retry the transaction; the retry answers the key from what that transaction left: %w",
		describeKeys(keys), err)
}

// describeKeys names a call's keys for an error: one, or the first three
// and a count.
func describeKeys(keys []string) string {
	if len(keys) == 1 {
		return fmt.Sprintf("idempotency key %q", keys[0])
	}
	quoted := make([]string, 0, 3)
	for _, k := range keys[:min(3, len(keys))] {
		quoted = append(quoted, fmt.Sprintf("%q", k))
	}
	s := "one of the idempotency keys " + strings.Join(quoted, ", ")
	if len(keys) > 3 {
		s += fmt.Sprintf(" and %d more", len(keys)-3)
	}
	return s
}
