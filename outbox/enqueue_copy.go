package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/internal/base/store"
)

// How EnqueueMany writes a large batch of new keys: COPY (issue 44's goal
// for EnqueueMany). insertSQL spends most of its time being a statement
// that can meet anything (keys stored or pruned, a prune racing the
// insert); a batch of keys never seen before, the common case, needs none
// of that. So a call of at least copyMin new keys draws its rows' ids
// (precheckSQL) and writes the rows with a binary COPY into
// sendonce_outbox, inside a savepoint; then one statement in a new
// snapshot looks for tombstones of its keys (postcheckSQL) before the
// savepoint is released. It answers from what it gave and what those
// statements returned. With 1,000 new keys a call (pg_stat_statements),
// insertSQL took 16.2 ms of the server's time; the COPY takes 11.8 (as
// much as River's InsertManyFastTx of as many jobs), the two statements
// 0.45 when there are no tombstones, and the calls ran about 1.3 times as
// fast (docs/performance.md). A first version that probed the unique
// index for every key before the COPY took 2.9 ms for its check, and ran
// about 1.15 times as slow as this one.
//
// Anything else goes through insertSQL as before: a key already stored, a
// key pruned, a transaction that reads one snapshot throughout
// (REPEATABLE READ or SERIALIZABLE, whose serialization failures
// snapshotCheck raises), a call behind a pooler whose pool names prepared
// statements (the checks around the COPY go in a pgx.Batch, which runs in
// the pool's mode; see producerTx), and a small call, for which the extra round trips cost more
// than the statement saves.
//
// The COPY path keeps every promise insertSQL keeps:
//
//   - A key stored already fails the COPY with a unique violation; one
//     that another transaction holds uncommitted makes the COPY wait for
//     it, as ON CONFLICT does, and fails it if that transaction commits.
//     The savepoint takes the COPY back, nothing of it stays, and insertSQL
//     answers the key as existing or as a key reuse. (Rows are in key
//     order, so a call of keys all stored fails at its first row.)
//   - A pruned key has no row, so the COPY writes it; postcheckSQL, in a
//     snapshot taken after the COPY, finds its tombstone, and the call
//     takes its rows back (a DELETE, as raced does: the savepoint is
//     released by then) and goes through insertSQL, which answers the key
//     from the tombstone. A prune racing the COPY is found the same way:
//     the COPY writes a key only once no live row holds it, so a prune that
//     deleted the key's row committed, with its tombstone, before the COPY
//     wrote it.
//   - The rows are marked checked, as insertSQL's are: the producer
//     triggers skip them (the run's tenant trigger too: EnqueueRun gave
//     the members their run's tenant); the run's topic trigger, the run
//     key's foreign key and the tally trigger fire for COPY as for INSERT.
//   - postcheckSQL notifies the workers, as insertSQL does: once per call,
//     a row due later too (its drain then reads its due time).
//
// A savepoint whose COPY wrote rows is a subtransaction with an id of its
// own, and a transaction that holds more than 64 of them overflows the
// cache every snapshot on the server reads them from, which slows the
// whole database until it ends. So a transaction takes the COPY path at
// most maxCopies times (counted per connection, by the transaction's id,
// which postcheckSQL returns); its later calls use insertSQL.

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

// The COPY's statements are package store's (store/outbox_copy.go, with
// the comments that explain them): store.BeginIntentCopy runs precheckSQL
// and opens the savepoint, store.CopyIntents runs copySQL with the rows
// appendCopyRows encodes, in store.OutboxCopyColumns' order, and
// store.EndIntentCopy runs postcheckSQL and releases the savepoint. The
// encoding stays here: it reads the intents as they are, and a row type of
// store's in between would cost a copy of each.

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
	start, err := store.BeginIntentCopy(ctx, tx, len(batch), run)
	if err != nil {
		return false, fmt.Errorf("outbox: draw ids before the copy: %w", err)
	}
	created, ids, xid, runTopic := start.Created, start.IDs, start.XID, start.RunTopic
	if xid == "" || xid != count.xid {
		// A transaction without an id has written nothing, so it holds no
		// subtransaction of ours; one with another id is another
		// transaction.
		count = copyCount{xid: xid}
	}
	if len(ids) != len(batch) || count.n >= maxCopies {
		if err := store.ReleaseIntentCopy(ctx, tx); err != nil {
			return false, fmt.Errorf("outbox: release the copy's savepoint: %w", err)
		}
		return false, nil
	}

	parent, state := traceContext(ctx)
	// Every inserted row is announced, one due later too (see notifySQL).
	const announce = true
	rows := appendCopyRows(nil, batch, ids, run, parent, state, o.queue)
	if err := store.CopyIntents(ctx, pc, rows); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != uniqueViolation {
			return false, fmt.Errorf("outbox: copy intents: %w", err)
		}
		// A key is stored: take the COPY back, and let insertSQL answer.
		if err := store.UndoIntentCopy(ctx, tx); err != nil {
			return false, fmt.Errorf("outbox: take back the copy: %w", err)
		}
		return false, nil
	}
	// One round trip looks for tombstones, notifies the workers, reads the
	// transaction's id and releases the savepoint.
	pruned, xid, err := store.EndIntentCopy(ctx, tx, hashes, announce)
	if err != nil {
		return false, fmt.Errorf("outbox: look up pruned keys after the copy: %w", err)
	}
	pc.CustomData()[copiesKey] = copyCount{xid: xid, n: count.n + 1}
	if pruned {
		// A key was pruned: take the rows back, and let insertSQL answer
		// from the tombstones.
		if err := store.TakeBackIntents(ctx, tx, ids); err != nil {
			return false, fmt.Errorf("outbox: take back the copy of a pruned key: %w", err)
		}
		return false, nil
	}
	// The call's results, records and payloads are three allocations, not
	// three per intent: a result the caller keeps keeps them all (about 0.5
	// MB for 1,000 emails), as long as it is kept.
	records := make([]Record, len(batch))
	answers := make([]EnqueueResult, len(batch))
	size := 0
	for n := range batch {
		size += len(batch[n].raw)
	}
	payloads := make([]byte, 0, size)
	for n, i := range idx {
		topic := batch[n].Topic
		if topic == "" && run != "" && batch[n].Kind != KindBroadcast {
			topic = runTopic // as the run's topic trigger gave it
		}
		// A copy: the caller's own []byte or json.RawMessage may change
		// later.
		payloads = append(payloads, batch[n].raw...)
		payload := payloads[len(payloads)-len(batch[n].raw) : len(payloads) : len(payloads)]
		fillRecord(&records[n], &batch[n], payload, ids[n], created, topic, parent, state)
		answers[n].Record = &records[n]
		results[i] = &answers[n]
	}
	return true, nil
}

// copyHeader starts a binary COPY: its signature, no flags, no header
// extension.
const copyHeader = "PGCOPY\n\377\r\n\000" + "\000\000\000\000" + "\000\000\000\000"

// pgEpoch is PostgreSQL's epoch for timestamps, 2000-01-01 UTC, in
// microseconds since the Unix epoch.
const pgEpoch = 946684800 * 1000000

// appendCopyRows appends to buf the binary COPY of batch's rows, in
// store.OutboxCopyColumns' order, with ids as their ids, and the trailer:
// the bytes pgx's CopyFrom would write, at a fraction of its allocations
// (see store's copySQL).
func appendCopyRows(buf []byte, batch []Intent, ids []int64, run, parent, state, queue string) []byte {
	size := len(copyHeader) + 2
	for n := range batch {
		b := &batch[n]
		size += 2 + len(store.OutboxCopyColumns)*4 + 8 + len(b.Key) + len(b.Kind) + 1 + len(b.raw) + len(b.TemplateID) + 8 +
			len(run) + len(parent) + len(state) + len(b.Topic) + len(queue) + 1 + len(b.Tenant)
	}
	buf = slices.Grow(buf, size)
	buf = append(buf, copyHeader...)
	for n := range batch {
		b := &batch[n]
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(store.OutboxCopyColumns)))
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(ids[n]))
		buf = appendCopyText(buf, b.Key, false)
		buf = appendCopyText(buf, string(b.Kind), false)
		buf = binary.BigEndian.AppendUint32(buf, uint32(1+len(b.raw)))
		buf = append(buf, 1) // jsonb's version
		buf = append(buf, b.raw...)
		buf = appendCopyText(buf, b.TemplateID, true)
		if b.SendAt.IsZero() {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // NULL
		} else {
			// As pgx encodes a timestamptz: microseconds, truncated.
			at := b.SendAt.Unix()*1000000 + int64(b.SendAt.Nanosecond())/1000 - pgEpoch
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(at))
		}
		buf = appendCopyText(buf, run, true)
		buf = appendCopyText(buf, parent, true)
		buf = appendCopyText(buf, state, true)
		buf = appendCopyText(buf, b.Topic, true)
		buf = appendCopyText(buf, queue, false)
		buf = binary.BigEndian.AppendUint32(buf, 1)
		buf = append(buf, 1) // checked
		buf = appendCopyText(buf, b.Tenant, true)
	}
	return binary.BigEndian.AppendUint16(buf, 0xFFFF) // the trailer
}

// appendCopyText appends a text field of a binary COPY row: NULL for ""
// when null is set.
func appendCopyText(buf []byte, s string, null bool) []byte {
	if s == "" && null {
		return binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
	return append(buf, s...)
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"
