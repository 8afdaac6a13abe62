package store

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements of EnqueueMany's COPY path (see outbox's enqueue_copy.go
// for when it is taken and the promises it keeps): a call of many new
// keys draws its rows' ids (outboxPrecheckSQL) and writes the rows with a
// binary COPY into sendonce_outbox (outboxCopySQL), inside a savepoint;
// then one statement in a new snapshot looks for tombstones of its keys
// (outboxPostcheckSQL) before the savepoint is released. Package outbox
// encodes the COPY's rows itself, in OutboxCopyColumns' order, straight
// from its intents: a row type of this package in between would cost a
// copy of every intent (see outboxCopySQL for what the encoding saves).

// outboxCopySavepoint names the savepoint around the COPY.
const outboxCopySavepoint = "sendonce_enqueue_copy"

// outboxPrecheckSQL draws ids for $1 rows from the outbox's sequence,
// unless the transaction reads one snapshot throughout (REPEATABLE READ or
// SERIALIZABLE: then the call goes through outboxInsertSQL). It also
// returns the transaction's start time (the rows' created_at and
// updated_at are now()), the transaction's id when it has one, and the
// topic of run $2.
const outboxPrecheckSQL = `
	SELECT now(), CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
			THEN ARRAY(SELECT nextval('sendonce_outbox_id_seq') FROM generate_series(1, $1::int)) END,
		coalesce(pg_current_xact_id_if_assigned()::text, ''),
		coalesce((SELECT r.topic FROM sendonce_run r WHERE r.key = $2), '')`

// outboxPostcheckSQL, run after the COPY in a new snapshot, tells whether
// one of the keys' hashes ($1) is tombstoned (pruned); when none is, it
// notifies the workers if $2 (always: see outboxNotifySQL). It returns the
// transaction's id, which the COPY gave it if it had none. The probes are
// scalar subqueries with LIMIT 1, so that a generic plan probes the index
// (see outboxInsertSQL's seen), and run only when there are tombstones at
// all, as there are none until a prune.
const outboxPostcheckSQL = `
	SELECT pruned, pg_current_xact_id()::text, (SELECT count(*) FROM (SELECT ` + outboxNotifySQL + ` WHERE $2 AND NOT pruned) n)
	FROM (SELECT EXISTS (SELECT 1 FROM sendonce_tombstone) AND EXISTS (SELECT 1 FROM unnest($1::bytea[]) AS h
		WHERE (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = h LIMIT 1) IS NOT NULL) AS pruned) c`

// OutboxCopyColumns are the columns the COPY writes, in the order of the
// fields of each row package outbox encodes; the rest take their defaults,
// as outboxInsertSQL's rows do. The id is the one outboxPrecheckSQL drew:
// COPY takes a value given for a GENERATED ALWAYS identity column, as
// PostgreSQL documents (CREATE TABLE: "In the COPY command, user-specified
// values are always used regardless of this setting").
var OutboxCopyColumns = []string{"id", "idempotency_key", "kind", "payload", "template_id", "send_at", "run_key",
	"traceparent", "tracestate", "topic", "queue", "checked", "tenant"}

// outboxCopySQL is the COPY of OutboxCopyColumns, in PostgreSQL's binary
// format, which package outbox's appendCopyRows writes. pgx's CopyFrom
// would write the same bytes, through its type map: each value boxed in an
// interface, and encoded by a plan looked up for it, through a pipe to a
// goroutine of its own: about 11 allocations a row (BenchmarkEnqueueMany:
// 16,200 allocations a call of 1,000 new intents with pgx's CopyFrom,
// 4,160 with this). The columns' types are the table's (bigint, text,
// jsonb, timestamptz, boolean); a change of one fails the COPY ("incorrect
// binary data format"), and TestEnqueueManyCopyStoresWhatTheStatementStores.
var outboxCopySQL = "COPY sendonce_outbox (" + strings.Join(OutboxCopyColumns, ", ") + ") FROM STDIN (FORMAT binary)"

// CopyStart is what BeginIntentCopy read.
type CopyStart struct {
	// Created is the transaction's start time, the rows' created_at.
	Created time.Time
	// IDs are the rows' ids, drawn from the outbox's sequence; nil when
	// the transaction reads one snapshot throughout.
	IDs []int64
	// XID is the transaction's id, "" when it has none yet.
	XID string
	// RunTopic is the topic of the run, "" when none.
	RunTopic string
}

// BeginIntentCopy draws ids for n rows (outboxPrecheckSQL, with the topic
// of run) and opens the COPY's savepoint, in one round trip (a pgx.Batch
// on tx): the savepoint costs nothing when the call goes on through
// InsertIntents, after ReleaseIntentCopy. The error is the batch's,
// unwrapped.
func BeginIntentCopy(ctx context.Context, tx pgx.Tx, n int, run string) (CopyStart, error) {
	var c CopyStart
	b := &pgx.Batch{}
	b.Queue(outboxPrecheckSQL, n, run).QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.Created, &c.IDs, &c.XID, &c.RunTopic)
	})
	b.Queue("SAVEPOINT " + outboxCopySavepoint)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return c, err
	}
	return c, nil
}

// ReleaseIntentCopy releases the COPY's savepoint, when the call does not
// copy after all.
func ReleaseIntentCopy(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, "RELEASE SAVEPOINT "+outboxCopySavepoint)
	return err
}

// CopyIntents runs the COPY (outboxCopySQL) on pc with rows, the binary
// COPY data of OutboxCopyColumns (header, rows and trailer). Its error is
// pgconn's, unwrapped: a key stored already is a *pgconn.PgError with
// SQLSTATE 23505.
func CopyIntents(ctx context.Context, pc *pgconn.PgConn, rows []byte) error {
	_, err := pc.CopyFrom(ctx, bytes.NewReader(rows), outboxCopySQL)
	return err
}

// UndoIntentCopy takes the COPY back: it rolls back to the savepoint and
// releases it, in one statement.
func UndoIntentCopy(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, "ROLLBACK TO SAVEPOINT "+outboxCopySavepoint+"; RELEASE SAVEPOINT "+outboxCopySavepoint)
	return err
}

// EndIntentCopy looks for tombstones of the copied keys (hashes),
// notifies the workers when there are none and announce is set, reads the
// transaction's id and releases the savepoint, in one round trip
// (outboxPostcheckSQL and the release, a pgx.Batch on tx). It returns
// whether a key was pruned, and the transaction's id. The error is the
// batch's, unwrapped.
func EndIntentCopy(ctx context.Context, tx pgx.Tx, hashes [][]byte, announce bool) (pruned bool, xid string, _ error) {
	b := &pgx.Batch{}
	b.Queue(outboxPostcheckSQL, hashes, announce).QueryRow(func(row pgx.Row) error {
		return row.Scan(&pruned, &xid, new(int64))
	})
	b.Queue("RELEASE SAVEPOINT " + outboxCopySavepoint)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, "", err
	}
	return pruned, xid, nil
}
