package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// How EnqueueMany writes (issues 15 and 44). One statement inserts the
// outbox rows, and tells the workers' drains of them: one round trip per
// call however many intents it has. (A key already stored costs one lookup
// more; a refused call one statement to take back what it wrote.) A large
// call of new keys is written with COPY instead (enqueue_copy.go), and
// comes here whenever COPY could not keep one of this statement's promises.
//
// An intent is its row alone: no River job per intent. The workers' drains
// claim due rows of their queue (job_id NULL) in batches. The rows are
// marked checked: EnqueueMany has validated each intent in Go, and the
// statement (with raced and snapshotCheck) makes the checks the triggers
// for plain-SQL producers make (tombstones, the snapshot; a canceled run
// is refused by EnqueueRun first), so those triggers skip them (migration
// 00025).
//
// The statement sends the notification itself, rather than in a pipeline
// beside it, because a pgx.Batch runs in the connection's default mode,
// which behind a transaction-mode pooler may name prepared statements the
// pooler loses (see producerTx); a statement of its own runs in the mode
// producerTx gives it.
//
// The rows go in in key order (see EnqueueMany). All the rows of one call
// get the trace context of the caller's span ($7, $8; see traceContext).
//
// It returns what the database chose for each row (id, creation time, and
// the topic, which a run member without one of its own takes from its run);
// the rest of the Record is what was given (see newRecord). Returning every
// column, and scanning it, cost a sixth of EnqueueMany's Go time and sent
// each payload back.
const insertSQL = `
	WITH i AS MATERIALIZED (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $10::text[], $11::bytea[]) WITH ORDINALITY
			AS i(key, kind, payload, template_id, send_at, topic, key_hash, ord)
	), o AS (
		INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, send_at, run_key, traceparent, tracestate, topic, queue, checked)
		SELECT key, kind, payload::jsonb, template_id, send_at, nullif($6, ''), nullif($7, ''), nullif($8, ''), nullif(topic, ''), $12, true FROM i
		WHERE NOT EXISTS (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = i.key_hash)
		ORDER BY ord
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id, idempotency_key, send_at, created_at, topic,
			(SELECT 1 FROM sendonce_outbox x WHERE x.idempotency_key = sendonce_outbox.idempotency_key LIMIT 1) IS NOT NULL AS seen
	), notified AS MATERIALIZED (
		SELECT ` + notifySQL + ` WHERE $9 AND EXISTS (SELECT 1 FROM o)
	)
	SELECT id, idempotency_key, created_at, coalesce(topic, ''), seen,
		current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
	FROM o LEFT JOIN notified ON true`

// The check of the tombstones in insertSQL is a NOT EXISTS on purpose,
// measured against the alternatives (Enqueue ×100 per transaction,
// EnqueueMany ×1,000): as a scalar subquery PostgreSQL planned the
// statement again on every call (1,500/s against 2,700/s), and as a
// plpgsql function it cost a call per row (EnqueueMany 18,000/s against
// 24,000/s). Its generic plan may hash the tombstone table while it is
// small; the planner only does so while that is the cheaper plan, and
// autovacuum's statistics of a growing table invalidate the cached plan.
//
// The payloads ($3) are sent as text[] and cast to jsonb in the statement:
// as jsonb[] parameters, pgx ran each one through its JSON codec (about
// 1 ms per 1,000 intents), and the server parses the text either way.
//
// The keys' hashes ($11) are computed here (keyHash), as
// sendonce_key_hash computes them: in SQL the hash of 1,000 keys took 3 ms
// of the statement's 30.
//
// seen (in insertSQL) is whether the statement's snapshot held a row under
// the key of a row it inserted (see raced). It is a scalar subquery with
// LIMIT 1 on purpose: as EXISTS, a generic plan may hash the whole table
// once per execution instead of probing the key's index (measured: the
// rate of single Enqueue calls fell from 2,800/s to 400/s as the table
// grew to 9,000 rows, in a variant of this statement).
//
// prunedSQL finds which of the keys have a tombstone (see raced).
const prunedSQL = `SELECT k FROM unnest($1::text[]) AS k
	WHERE (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = sendonce_key_hash(k) LIMIT 1) IS NOT NULL`

// notifySQL (in insertSQL) tells the workers, at commit, that intents are
// due: the channel the plain-SQL producers' trigger notifies (see
// sendstate.NotifyChannel), on which each worker's sweeper listens and
// wakes its drain. It goes once per call that inserted a row, due now or
// later: a drain that hears of a row due later wakes again at its time
// (its look reads the queue's next due time), and looks for due rows only
// every half minute otherwise. The CTE is referenced (LEFT JOIN ... ON true), so PostgreSQL
// runs it, at most once.
const notifySQL = `pg_notify('sendonce_outbox', '')`

// queueNameRE is River's rule for a queue name (validateQueueName): no
// River client could be configured to work another queue, so the outbox
// refuses one (the column's check, sendonce_outbox_queue_check, holds the
// same rule for plain-SQL producers).
var queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// insert inserts the rows of the intents at the given indexes, in that
// order, and fills in their results.
func (o *Outbox) insert(ctx context.Context, tx producerTx, in []Intent, idx []int, results []*EnqueueResult) error {
	// The intents of one call belong to one run, or to none (EnqueueRun).
	run := in[idx[0]].run
	if len(o.queue) > 64 || !queueNameRE.MatchString(o.queue) {
		return fmt.Errorf("outbox: queue name %q is invalid: River wants at most 64 lowercase letters and digits, separated by underscores or hyphens", o.queue)
	}
	batch := make([]Intent, len(idx))
	keys := make([]string, len(idx))
	hashes := make([][]byte, len(idx))
	hashBuf := make([]byte, 0, keyHashLen*len(idx)) // one allocation for all the hashes
	// Every inserted row is announced, one due later too (see notifySQL).
	const announce = true
	for n, i := range idx {
		hashBuf = appendKeyHash(hashBuf, in[i].Key)
		batch[n], keys[n], hashes[n] = in[i], in[i].Key, hashBuf[len(hashBuf)-keyHashLen:len(hashBuf):len(hashBuf)]
	}
	if done, err := o.copyIn(ctx, tx, idx, batch, keys, hashes, results); done || err != nil {
		return err
	}
	kinds, payloads, templates, sendAts := columnsOf(batch)
	topics := make([]string, len(batch))
	for n := range batch {
		topics[n] = batch[n].Topic
	}
	parent, state := traceContext(ctx)
	rows, err := tx.Query(ctx, insertSQL,
		keys, kinds, payloads, templates, sendAts, run, parent, state, announce, topics, hashes, o.queue)
	inserted, seen, snapshot, err := scanInserted(batch, parent, state, rows, err)
	if err != nil {
		if isSerializationFailure(err) {
			// A row under one of the keys committed after the snapshot
			// (see snapshotError).
			return snapshotError(keys, err)
		}
		return fmt.Errorf("outbox: insert intents: %w", err)
	}
	if snapshot {
		if err := snapshotCheck(ctx, tx, inserted, seen); err != nil {
			return err
		}
	} else if err := raced(ctx, tx, inserted, seen); err != nil {
		return err
	}
	if len(inserted) < len(batch) {
		return o.settleExisting(ctx, tx, in, idx, inserted, results)
	}
	for _, i := range idx {
		results[i] = &EnqueueResult{Record: inserted[in[i].Key]}
	}
	return nil
}

// scanInserted reads the rows insertSQL inserted, by key, as Records of
// the intents in batch (see newRecord), the keys of those whose statement
// saw a row under the key already (see raced), and whether the transaction
// reads one snapshot throughout (REPEATABLE READ or SERIALIZABLE; see
// snapshotCheck).
func scanInserted(batch []Intent, parent, state string, rows pgx.Rows, err error) (inserted map[string]*Record, seen []string, snapshot bool, _ error) {
	if err != nil {
		return nil, nil, false, err
	}
	defer rows.Close()
	byKey := make(map[string]*Intent, len(batch))
	for i := range batch {
		byKey[batch[i].Key] = &batch[i]
	}
	inserted = make(map[string]*Record, len(batch))
	for rows.Next() {
		var id int64
		var key, topic string
		var created time.Time
		var s bool
		if err := rows.Scan(&id, &key, &created, &topic, &s, &snapshot); err != nil {
			return nil, nil, false, err
		}
		in := byKey[key]
		if in == nil {
			return nil, nil, false, fmt.Errorf("outbox: the insert returned key %q, which was not enqueued", key)
		}
		inserted[key] = newRecord(in, id, created, topic, parent, state)
		if s {
			seen = append(seen, key)
		}
	}
	return inserted, seen, snapshot, rows.Err()
}

// newRecord is the Record of intent in as insertSQL stored it: pending, with
// the id, creation time and topic the database gave it, and the
// trace context of the caller's span. Its Payload is the text given, which
// the database holds as jsonb (the same JSON value; Get returns the stored
// text).
func newRecord(in *Intent, id int64, created time.Time, topic, parent, state string) *Record {
	// A copy: the caller's own []byte or json.RawMessage may change later.
	r := &Record{}
	fillRecord(r, in, slices.Clone(in.raw), id, created, topic, parent, state)
	return r
}

// fillRecord sets r to the Record newRecord describes, with payload (a
// copy of in's) as its Payload.
func fillRecord(r *Record, in *Intent, payload json.RawMessage, id int64, created time.Time, topic, parent, state string) {
	*r = Record{ID: id, Key: in.Key, Kind: in.Kind, Payload: payload, TemplateID: in.TemplateID, State: StatePending,
		CreatedAt: created, UpdatedAt: created, TraceParent: parent, TraceState: state, Topic: topic}
	if !in.SendAt.IsZero() {
		at := in.SendAt
		r.SendAt = &at
	}
}

// raced takes back the rows just inserted under keys a prune
// deleted meanwhile. insertSQL leaves tombstoned keys out, but its snapshot
// is taken when it starts: a prune of the key that commits after that
// deletes the old row, and the insert, which waited for the prune on the
// key's unique index, goes in. Such an insert is told by the row its own
// snapshot still saw under the key (seen); by the time it went in the
// tombstone was committed, and prunedSQL (a later statement, a new snapshot
// under READ COMMITTED) finds it. The keys are then answered from their
// tombstones like the ones left out. Without seen keys (every insert but
// one that raced a prune or a delete) this costs nothing. A REPEATABLE READ
// or SERIALIZABLE transaction has no new snapshot to look in: snapshotCheck
// runs instead.
func raced(ctx context.Context, tx producerTx, inserted map[string]*Record, seen []string) error {
	if len(seen) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, prunedSQL, seen)
	if err != nil {
		return fmt.Errorf("outbox: look up keys pruned during the insert: %w", err)
	}
	pruned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("outbox: look up keys pruned during the insert: %w", err)
	}
	var ids []int64
	for _, k := range pruned {
		if rec, ok := inserted[k]; ok {
			ids = append(ids, rec.ID)
			delete(inserted, k)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM sendonce_outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("outbox: take back an insert that raced a prune: %w", err)
	}
	return nil
}

// keyHash is sendonce_key_hash(key): the first 16 bytes of the SHA-256 of
// the key's UTF-8 text, the tombstones' key.
func keyHash(key string) []byte {
	return appendKeyHash(nil, key)
}

// keyHashLen is the length of a key's hash.
const keyHashLen = 16

// appendKeyHash appends keyHash(key) to dst.
func appendKeyHash(dst []byte, key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return append(dst, sum[:keyHashLen]...)
}
