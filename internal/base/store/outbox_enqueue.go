package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of package outbox's EnqueueMany (issues 15 and 44): one
// statement inserts the outbox rows, and tells the workers' drains of them
// (outboxInsertSQL); the others answer keys already stored or pruned, and
// take back what a refused call wrote. The COPY path is in
// outbox_copy.go, the checks of a REPEATABLE READ or SERIALIZABLE
// transaction in outbox_snapshot.go. Package outbox holds the logic that
// chooses among them (see its enqueue_insert.go).
//
// The statement sends the notification itself, rather than in a pipeline
// beside it, because a pgx.Batch runs in the connection's default mode,
// which behind a transaction-mode pooler may name prepared statements the
// pooler loses (see outbox's producerTx); a statement of its own runs in
// the mode producerTx gives it.
//
// The rows go in in key order (see EnqueueMany). All the rows of one call
// get the trace context of the caller's span ($7, $8; see outbox's
// traceContext).
//
// It returns what the database chose for each row (id, creation time, and
// the topic, which a run member without one of its own takes from its run);
// the rest of the Record is what was given (see outbox's newRecord).
// Returning every column, and scanning it, cost a sixth of EnqueueMany's Go
// time and sent each payload back.
const outboxInsertSQL = `
	WITH i AS MATERIALIZED (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $10::text[], $11::bytea[], $13::text[]) WITH ORDINALITY
			AS i(key, kind, payload, template_id, send_at, topic, key_hash, tenant, ord)
	), o AS (
		INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, send_at, run_key, traceparent, tracestate, topic, queue, checked, tenant)
		SELECT key, kind, payload::jsonb, template_id, send_at, nullif($6, ''), nullif($7, ''), nullif($8, ''), nullif(topic, ''), $12, true, nullif(tenant, '') FROM i
		WHERE NOT EXISTS (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = i.key_hash)
		ORDER BY ord
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id, idempotency_key, send_at, created_at, topic,
			(SELECT 1 FROM sendonce_outbox x WHERE x.idempotency_key = sendonce_outbox.idempotency_key LIMIT 1) IS NOT NULL AS seen
	), notified AS MATERIALIZED (
		SELECT ` + outboxNotifySQL + ` WHERE $9 AND EXISTS (SELECT 1 FROM o)
	)
	SELECT id, idempotency_key, created_at, coalesce(topic, ''), seen,
		current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
	FROM o LEFT JOIN notified ON true`

// The check of the tombstones in outboxInsertSQL is a NOT EXISTS on
// purpose, measured against the alternatives (Enqueue ×100 per
// transaction, EnqueueMany ×1,000): as a scalar subquery PostgreSQL planned
// the statement again on every call (1,500/s against 2,700/s), and as a
// plpgsql function it cost a call per row (EnqueueMany 18,000/s against
// 24,000/s). Its generic plan may hash the tombstone table while it is
// small; the planner only does so while that is the cheaper plan, and
// autovacuum's statistics of a growing table invalidate the cached plan.
//
// The payloads ($3) are sent as text[] and cast to jsonb in the statement:
// as jsonb[] parameters, pgx ran each one through its JSON codec (about
// 1 ms per 1,000 intents), and the server parses the text either way.
//
// The keys' hashes ($11) are computed by the caller (outbox's keyHash), as
// sendonce_key_hash computes them: in SQL the hash of 1,000 keys took 3 ms
// of the statement's 30.
//
// seen (in outboxInsertSQL) is whether the statement's snapshot held a row
// under the key of a row it inserted (see outbox's raced). It is a scalar
// subquery with LIMIT 1 on purpose: as EXISTS, a generic plan may hash the
// whole table once per execution instead of probing the key's index
// (measured: the rate of single Enqueue calls fell from 2,800/s to 400/s as
// the table grew to 9,000 rows, in a variant of this statement).
//
// outboxPrunedSQL finds which of the keys have a tombstone (see outbox's
// raced).
const outboxPrunedSQL = `SELECT k FROM unnest($1::text[]) AS k
	WHERE (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = sendonce_key_hash(k) LIMIT 1) IS NOT NULL`

// outboxNotifySQL (in outboxInsertSQL) tells the workers, at commit, that
// intents are due: the channel the plain-SQL producers' trigger notifies
// (see sendstate.NotifyChannel), on which each worker's sweeper listens and
// wakes its drain. It goes once per call that inserted a row, due now or
// later: a drain that hears of a row due later wakes again at its time
// (its look reads the queue's next due time), and looks for due rows only
// every half minute otherwise. The CTE is referenced (LEFT JOIN ... ON
// true), so PostgreSQL runs it, at most once.
const outboxNotifySQL = `pg_notify('sendonce_outbox', '')`

// InsertIntentsArgs are the parameters of InsertIntents: one element per
// intent in each slice, in key order.
type InsertIntentsArgs struct {
	Keys      []string
	Kinds     []string
	Payloads  []string // JSON text, cast to jsonb in the statement
	Templates []*string
	SendAts   []*time.Time
	// Run is the run's key, or "".
	Run string
	// TraceParent and TraceState are the caller's span's trace context, or "".
	TraceParent, TraceState string
	// Announce notifies the workers (see outboxNotifySQL).
	Announce bool
	Topics   []string
	// KeyHashes are the keys' sendonce_key_hash.
	KeyHashes [][]byte
	Queue     string
	// Tenants are the intents' tenants ("": the default tenant, NULL), a
	// run's members' already their run's (the rows are checked, so the
	// run's tenant trigger skips them).
	Tenants []string
}

// InsertedIntent is a row InsertIntents inserted: what the database chose
// for it, and Seen, whether the statement's snapshot held a row under its
// key already (a prune raced the insert).
type InsertedIntent struct {
	ID        int64
	Key       string
	CreatedAt time.Time
	Topic     string
	Seen      bool
}

// InsertIntents runs EnqueueMany's insert (outboxInsertSQL) on db, once,
// and calls each for every row inserted (a key stored or tombstoned
// already gets none). It returns whether the transaction reads one
// snapshot throughout (REPEATABLE READ or SERIALIZABLE). The errors are
// the database's, or each's, unwrapped.
func InsertIntents(ctx context.Context, db DB, a *InsertIntentsArgs, each func(InsertedIntent) error) (snapshot bool, _ error) {
	rows, err := db.Query(ctx, outboxInsertSQL,
		a.Keys, a.Kinds, a.Payloads, a.Templates, a.SendAts, a.Run, a.TraceParent, a.TraceState, a.Announce, a.Topics, a.KeyHashes, a.Queue, a.Tenants)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var r InsertedIntent
	for rows.Next() {
		if err := rows.Scan(&r.ID, &r.Key, &r.CreatedAt, &r.Topic, &r.Seen, &snapshot); err != nil {
			return false, err
		}
		if err := each(r); err != nil {
			return false, err
		}
	}
	return snapshot, rows.Err()
}

// PrunedKeys returns which of keys have a tombstone (outboxPrunedSQL), in
// a new statement: under READ COMMITTED, a new snapshot.
func PrunedKeys(ctx context.Context, db DB, keys []string) ([]string, error) {
	rows, err := db.Query(ctx, outboxPrunedSQL, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// outboxDeleteSQL takes back rows a call of EnqueueMany wrote.
const outboxDeleteSQL = `DELETE FROM sendonce_outbox WHERE id = ANY($1)`

// TakeBackIntents deletes the intents with the given ids: EnqueueMany takes
// back what it wrote when the call is refused, or when a key it wrote
// turns out pruned.
func TakeBackIntents(ctx context.Context, db DB, ids []int64) error {
	_, err := db.Exec(ctx, outboxDeleteSQL, ids)
	return err
}

// outboxExistingSQL loads the intents stored under any of the keys ($1),
// each with whether it is the intent given for its key (kind $2, payload
// $3, template $4). The comparison runs in SQL, so that two JSON texts
// equal as jsonb (key order, spacing) count as the same.
const outboxExistingSQL = `
		SELECT ` + IntentColumns + `, same FROM (
			SELECT o.*, o.kind = i.kind AND o.payload = i.payload AND o.template_id IS NOT DISTINCT FROM i.template_id AS same
			FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::text[]) AS i(key, kind, payload, template_id)
			JOIN sendonce_outbox o ON o.idempotency_key = i.key) AS found`

// FindIntents loads the intents already stored under any of keys, and
// calls each with every one (a whole row, IntentColumns) and whether it is
// the same intent as the one given for its key: the same kind, template
// and payload (equal as jsonb). The slices are the intents' columns, as
// for InsertIntents. The errors are unwrapped.
func FindIntents(ctx context.Context, db DB, keys, kinds, payloads []string, templates []*string, each func(in *Intent, same bool)) error {
	rows, err := db.Query(ctx, outboxExistingSQL, keys, kinds, payloads, templates)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var same bool
		in, err := ScanIntent(rows, &same)
		if err != nil {
			return err
		}
		each(in, same)
	}
	return rows.Err()
}

// outboxTombstonesSQL finds the tombstones of the keys ($1), each with
// whether the intent given for it (kind $2, payload $3, template $4) is
// the one pruned: the same hash.
const outboxTombstonesSQL = `
		SELECT i.key, t.state, t.pruned_at, t.intent_hash = sendonce_intent_hash(i.kind, i.template_id, i.payload)
		FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::text[]) AS i(key, kind, payload, template_id)
		CROSS JOIN LATERAL (SELECT * FROM sendonce_tombstone t WHERE t.key_hash = sendonce_key_hash(i.key) LIMIT 1) t`

// FindTombstones calls each with every key of keys that has a tombstone:
// the pruned intent's final state, when it was pruned, and whether the
// intent given for the key (kinds, payloads, templates, as for
// FindIntents) is the pruned one. The errors are unwrapped.
func FindTombstones(ctx context.Context, db DB, keys, kinds, payloads []string, templates []*string,
	each func(key, state string, prunedAt time.Time, same bool)) error {
	rows, err := db.Query(ctx, outboxTombstonesSQL, keys, kinds, payloads, templates)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key, state string
		var at time.Time
		var same bool
		if err := rows.Scan(&key, &state, &at, &same); err != nil {
			return err
		}
		each(key, state, at, same)
	}
	return rows.Err()
}

// outboxCompareSQL returns the positions (from 0) of the pairs of
// payloads ($1, $2) that differ as jsonb.
const outboxCompareSQL = `SELECT coalesce(array_agg(n - 1 ORDER BY n), '{}') FROM unnest($1::jsonb[], $2::jsonb[]) WITH ORDINALITY AS p(a, b, n)
		WHERE a <> b`

// ComparePayloads returns the positions (from 0, in order) of the pairs
// of payloads firsts[i] and laters[i] that are not equal as jsonb (key
// order and spacing aside).
func ComparePayloads(ctx context.Context, db DB, firsts, laters []string) ([]int32, error) {
	var differ []int32
	err := db.QueryRow(ctx, outboxCompareSQL, firsts, laters).Scan(&differ)
	return differ, err
}
