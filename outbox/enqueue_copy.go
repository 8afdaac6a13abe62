package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// How EnqueueMany writes a large batch of new keys: COPY (issue 44's goal
// for EnqueueMany). insertSQL spends most of its time being a statement
// that can meet anything (keys stored or pruned, a prune racing the
// insert); a batch of keys never seen before, the common case, needs none
// of that. So a call of at least copyMin new keys asks first (precheckSQL,
// one statement, one row) whether any of its keys is stored or tombstoned
// in the statement's snapshot, and draws the rows' ids; when none is, it
// writes the rows with a binary COPY into sendonce_outbox, inside a
// savepoint, and answers from what it gave and what the pre-check
// returned. With 1,000 new keys a call, insertSQL took about 16 ms of the
// server's time; the pre-check takes about 3 and the COPY 12, and the
// calls ran about 1.2 times as fast (docs/performance.md).
//
// Anything else goes through insertSQL as before: a key found by the
// pre-check, a transaction that reads one snapshot throughout (REPEATABLE
// READ or SERIALIZABLE, whose serialization failures snapshotCheck
// raises), a call behind a pooler whose pool names prepared statements
// (pgx describes COPY's columns in the pool's mode; see producerTx), and a
// small call, for which the pre-check's and the savepoint's round trips
// cost more than the statement saves.
//
// The COPY path keeps every promise insertSQL keeps:
//
//   - A key another transaction inserted and committed after the
//     pre-check's snapshot fails the COPY with a unique violation (the COPY
//     waits for that transaction first, as ON CONFLICT does). The savepoint
//     takes the COPY back, nothing of it stays, and the call goes on
//     through insertSQL, which answers the key as existing or as a key
//     reuse. Should that transaction roll back instead, the COPY goes on.
//   - A key with a tombstone, or with a row the pre-check saw, goes through
//     insertSQL, which answers it from the tombstone or the row, and looks
//     again for a prune racing it (raced). A prune deletes only rows
//     settled longer ago than its retention, so it cannot delete a row
//     committed after the pre-check's snapshot before the COPY writes its
//     key (insertSQL's own snapshot leaves the same window, shorter).
//   - The rows are marked checked, as insertSQL's are: the producer
//     triggers skip them; the run's topic trigger, the run key's foreign
//     key and the tally trigger fire for COPY as for INSERT.
//   - The statement that releases the savepoint notifies the workers, as
//     insertSQL does, when a row is due now.
//
// A savepoint whose COPY wrote rows is a subtransaction with an id of its
// own, and a transaction that holds more than 64 of them overflows the
// cache every snapshot on the server reads them from, which slows the
// whole database until it ends. So a transaction takes the COPY path at
// most maxCopies times (counted per connection, by the transaction's id,
// which the statement releasing the savepoint returns); its later calls
// use insertSQL.

// copyMin is the fewest new keys a call writes with COPY. Measured (one
// connection, calls of 100, 200 and 400 new keys, 10,000 intents): at 100
// the COPY path and insertSQL ran alike, at 200 and 400 COPY ran 1.1-1.15
// times as fast.
var copyMin = 200

// maxCopies is how many calls of one transaction may write with COPY,
// each in a subtransaction: half of the 64 a backend caches, so that a
// caller's own savepoints fit beside them.
const maxCopies = 32

// copiesKey is where a connection's CustomData holds the copyCount of the
// transaction it last copied in.
const copiesKey = "sendonce.outbox.copies"

// copyCount is how many calls of transaction xid (pg_current_xact_id)
// wrote with COPY.
type copyCount struct {
	xid string
	n   int
}

// copySavepoint names the savepoint around the COPY.
const copySavepoint = "sendonce_enqueue_copy"

// precheckSQL tells whether the call must go through insertSQL (hit): the
// transaction reads one snapshot throughout, or one of the keys ($1) is
// stored, or one of their hashes ($2) tombstoned, in the statement's
// snapshot. When none is, it draws an id for each key from the outbox's
// sequence, in the order given. It also returns the transaction's start
// time (the rows' created_at and updated_at are now()), the transaction's
// id when it has one, and the topic of run $3. The probes of the keys are
// scalar subqueries with LIMIT 1, so that a generic plan probes the
// unique index (see insertSQL's seen); the tombstones are probed only when
// there are any, as there are none until a prune.
const precheckSQL = `
	SELECT now(), hit, CASE WHEN NOT hit THEN ARRAY(SELECT nextval('sendonce_outbox_id_seq') FROM generate_series(1, cardinality($1::text[]))) END,
		coalesce(pg_current_xact_id_if_assigned()::text, ''),
		coalesce((SELECT r.topic FROM sendonce_run r WHERE r.key = $3), '')
	FROM (SELECT current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
		OR EXISTS (SELECT 1 FROM unnest($1::text[]) AS k WHERE (SELECT 1 FROM sendonce_outbox o WHERE o.idempotency_key = k LIMIT 1) IS NOT NULL)
		OR EXISTS (SELECT 1 FROM sendonce_tombstone) AND EXISTS (SELECT 1 FROM unnest($2::bytea[]) AS h
			WHERE (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = h LIMIT 1) IS NOT NULL) AS hit) c`

// copyColumns are the columns the COPY writes; the rest take their
// defaults, as insertSQL's rows do.
var copyColumns = []string{"id", "idempotency_key", "kind", "payload", "template_id", "send_at", "run_key",
	"traceparent", "tracestate", "topic", "queue", "checked"}

// copyIn writes the rows of batch (the intents at idx, in key order) with
// COPY when it can (see above) and fills in their results. It returns false,
// having written nothing, when insertSQL must write them instead.
func (o *Outbox) copyIn(ctx context.Context, tx producerTx, idx []int, batch []Intent, keys []string, hashes [][]byte, results []*EnqueueResult) (bool, error) {
	if len(batch) < copyMin || !tx.batches {
		return false, nil
	}
	pc := tx.Conn().PgConn()
	count, _ := pc.CustomData()[copiesKey].(copyCount)
	run := batch[0].run
	// The savepoint goes in the pre-check's round trip: it costs nothing
	// when the call goes on through insertSQL, which releases it.
	var created time.Time
	var hit bool
	var ids []int64
	var xid, runTopic string
	b := &pgx.Batch{}
	b.Queue(precheckSQL, keys, hashes, run).QueryRow(func(row pgx.Row) error {
		return row.Scan(&created, &hit, &ids, &xid, &runTopic)
	})
	b.Queue("SAVEPOINT " + copySavepoint)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, fmt.Errorf("outbox: look up keys before the copy: %w", err)
	}
	if xid == "" || xid != count.xid {
		// A transaction without an id has written nothing, so it holds no
		// subtransaction of ours; one with another id is another
		// transaction.
		count = copyCount{xid: xid}
	}
	if hit || len(ids) != len(batch) || count.n >= maxCopies {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+copySavepoint); err != nil {
			return false, fmt.Errorf("outbox: release the copy's savepoint: %w", err)
		}
		return false, nil
	}

	parent, state := traceContext(ctx)
	available := false
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"sendonce_outbox"}, copyColumns, pgx.CopyFromSlice(len(batch), func(n int) ([]any, error) {
		b := &batch[n]
		available = available || b.SendAt.IsZero()
		return []any{ids[n], b.Key, string(b.Kind), []byte(b.raw), nullText(b.TemplateID), nullTime(b.SendAt), nullText(run),
			nullText(parent), nullText(state), nullText(b.Topic), o.queue, true}, nil
	}))
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != uniqueViolation {
			return false, fmt.Errorf("outbox: copy intents: %w", err)
		}
		// A transaction that committed since the pre-check's snapshot holds
		// one of the keys: take the COPY back, and let insertSQL answer.
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+copySavepoint+"; RELEASE SAVEPOINT "+copySavepoint); err != nil {
			return false, fmt.Errorf("outbox: take back the copy: %w", err)
		}
		return false, nil
	}
	// One round trip releases the savepoint, notifies the workers when a
	// row is due now, and reads the transaction's id, which the COPY gave
	// it if it had none.
	release := "RELEASE SAVEPOINT " + copySavepoint + "; SELECT pg_current_xact_id()::text"
	if available {
		release += ", " + notifySQL
	}
	res, err := pc.Exec(ctx, release).ReadAll()
	if err != nil {
		return false, fmt.Errorf("outbox: release the copy's savepoint: %w", err)
	}
	if len(res) != 2 || len(res[1].Rows) != 1 {
		return false, fmt.Errorf("outbox: release the copy's savepoint: %d results, want 2", len(res))
	}
	pc.CustomData()[copiesKey] = copyCount{xid: string(res[1].Rows[0][0]), n: count.n + 1}
	for n, i := range idx {
		topic := batch[n].Topic
		if topic == "" && run != "" && batch[n].Kind != KindBroadcast {
			topic = runTopic // as the run's topic trigger gave it
		}
		results[i] = &EnqueueResult{Record: newRecord(&batch[n], ids[n], created, topic, parent, state)}
	}
	return true, nil
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
