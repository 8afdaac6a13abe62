package outbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/sendjob"
)

// How EnqueueMany writes (issue 15). One statement inserts the outbox rows
// and their River jobs, and sends River's insert notification: one round
// trip per call however many intents it has. (A key already stored costs
// one lookup more; a refused call two statements to take back what it
// wrote.)
//
// The statement sends the notification itself, rather than in a pipeline
// beside it, because a pgx.Batch runs in the connection's default mode,
// which behind a transaction-mode pooler may name prepared statements the
// pooler loses (see producerTx); a statement of its own runs in the mode
// producerTx gives it.
//
// It used to call River's InsertManyTx, then INSERT the rows: three round
// trips, and for 1,000 intents about 45 ms, of which 15 ms in River's
// statement (built for unique jobs: ON CONFLICT on River's unique index,
// every column of every job sent back), 17 ms in the rows' INSERT and 10 ms
// in Go, a third of it River building its parameters and decoding its rows.
// River's InsertManyFastTx (COPY) returns no job ids, which the rows need;
// COPYing the jobs with ids drawn beforehand measured no faster than this
// statement, and took another round trip. What remains is mostly the
// database's work on two tables, river_job's with two GIN indexes.
//
// So the jobs are written here, with the columns River v0.51's own insert
// (JobInsertFastMany in riverpgxv5) sets for a job without unique options,
// from the same sendjob.Args and sendjob.InsertOpts River was given: state
// available, or scheduled when the intent has a send time (River's rule for
// a non-zero ScheduledAt, even a past one); created_at and scheduled_at from
// the database's clock where River takes the client's; metadata '{}', no
// tags, no unique key. River has no trigger on river_job; its producers learn
// of new jobs from the notification, which the statement sends as River's
// PGNotifyMany does (see notifySQL). The tests compare the jobs with ones
// River inserts, and have a River client work them.
//
// Each new row draws its job id from River's sequence; only the rows ON
// CONFLICT lets in get a job, so a key already stored leaves no job behind.
// The rows go in in key order (see EnqueueMany). All the rows of one call
// get the trace context of the caller's span ($12, $13; see traceContext).
//
// It returns what the database chose for each row (id, job id, creation
// time, and the topic, which a run member without one of its own takes from
// its run); the rest of the Record is what was given (see newRecord).
// Returning every column, and scanning it, cost a sixth of EnqueueMany's Go
// time and sent each payload back.
const insertSQL = `
	WITH i AS MATERIALIZED (
		SELECT *, nextval('river_job_id_seq'::regclass) AS job_id
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $15::text[], $16::bytea[]) WITH ORDINALITY
			AS i(key, kind, payload, template_id, send_at, args, topic, key_hash, ord)
	), o AS (
		INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, send_at, job_id, run_key, traceparent, tracestate, topic)
		SELECT key, kind, payload::jsonb, template_id, send_at, job_id, nullif($11, ''), nullif($12, ''), nullif($13, ''), nullif(topic, '') FROM i
		WHERE NOT EXISTS (SELECT 1 FROM sendonce_tombstone t WHERE t.key_hash = i.key_hash)
		ORDER BY ord
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id, idempotency_key, job_id, send_at, created_at, topic,
			(SELECT 1 FROM sendonce_outbox x WHERE x.idempotency_key = sendonce_outbox.idempotency_key LIMIT 1) IS NOT NULL AS seen
	), job AS (
		INSERT INTO river_job (id, args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
		SELECT i.job_id, i.args::jsonb, now(), $7, $8, '{}', $9, $10, coalesce(i.send_at, now()),
			CASE WHEN i.send_at IS NULL THEN 'available' ELSE 'scheduled' END::river_job_state, '{}'
		FROM o JOIN i ON i.job_id = o.job_id
	), notified AS MATERIALIZED (
		SELECT ` + notifySQL + ` WHERE $14 <> '' AND EXISTS (SELECT 1 FROM o WHERE o.send_at IS NULL)
	)
	SELECT id, idempotency_key, job_id, created_at, coalesce(topic, ''), seen,
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
// The payloads ($3) and the jobs' arguments ($6) are sent as text[] and
// cast to jsonb in the statement: as jsonb[] parameters, pgx ran each one
// through its JSON codec (about 1 ms per 1,000 intents), and the server
// parses the text either way.
//
// The keys' hashes ($16) are computed here (keyHash), as
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

// notifySQL (in insertSQL) tells the workers of a queue, at commit, that
// jobs are available, as River's PGNotifyMany does: topic
// "<schema>.river_insert", payload {"queue": "<name>"} ($14). River's client
// sends it at most once per FetchCooldown and queue; the outbox's had the
// shortest, 1 ms, so once per call is as often. It goes when the call
// inserted a row to send now. The CTE is referenced (LEFT JOIN ... ON
// true), so PostgreSQL runs it, at most once.
const notifySQL = `pg_notify(concat(current_schema()::text, '.river_insert'), $14)`

// queueNameRE is River's rule for a queue name (validateQueueName): River
// refused to insert a job into a queue no worker could be configured for,
// so the outbox refuses too.
var queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// insert inserts the rows of the intents at the given indexes, in that
// order, with their River jobs, and fills in their results.
func (o *Outbox) insert(ctx context.Context, tx producerTx, in []Intent, idx []int, results []*EnqueueResult) error {
	// The intents of one call belong to one run, or to none (EnqueueRun).
	run := in[idx[0]].run
	opts := sendjob.InsertOpts(o.queue, time.Time{}, sendjob.PriorityFor(run))
	if len(opts.Queue) > 64 || !queueNameRE.MatchString(opts.Queue) {
		return fmt.Errorf("outbox: queue name %q is invalid: River wants at most 64 lowercase letters and digits, separated by underscores or hyphens", opts.Queue)
	}
	batch := make([]Intent, len(idx))
	keys := make([]string, len(idx))
	hashes := make([][]byte, len(idx))
	args := make([]string, len(idx))
	available := false
	for n, i := range idx {
		batch[n], keys[n], hashes[n] = in[i], in[i].Key, keyHash(in[i].Key)
		args[n] = jobArgs(in[i].Key, in[i].Kind, run)
		available = available || in[i].SendAt.IsZero()
	}
	kinds, payloads, templates, sendAts := columnsOf(batch)
	topics := make([]string, len(batch))
	for n := range batch {
		topics[n] = batch[n].Topic
	}
	parent, state := traceContext(ctx)
	notify := ""
	if available {
		notify = fmt.Sprintf(`{"queue": %q}`, opts.Queue)
	}
	rows, err := tx.Query(ctx, insertSQL,
		keys, kinds, payloads, templates, sendAts, args,
		sendjob.Args{}.Kind(), opts.MaxAttempts, opts.Priority, opts.Queue, run, parent, state, notify, topics, hashes)
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
		var id, jobID int64
		var key, topic string
		var created time.Time
		var s bool
		if err := rows.Scan(&id, &key, &jobID, &created, &topic, &s, &snapshot); err != nil {
			return nil, nil, false, err
		}
		in := byKey[key]
		if in == nil {
			return nil, nil, false, fmt.Errorf("outbox: the insert returned key %q, which was not enqueued", key)
		}
		inserted[key] = newRecord(in, id, jobID, created, topic, parent, state)
		if s {
			seen = append(seen, key)
		}
	}
	return inserted, seen, snapshot, rows.Err()
}

// newRecord is the Record of intent in as insertSQL stored it: pending, with
// the id, job id, creation time and topic the database gave it, and the
// trace context of the caller's span. Its Payload is the text given, which
// the database holds as jsonb (the same JSON value; Get returns the stored
// text).
func newRecord(in *Intent, id, jobID int64, created time.Time, topic, parent, state string) *Record {
	// A copy: the caller's own []byte or json.RawMessage may change later.
	r := &Record{ID: id, Key: in.Key, Kind: in.Kind, Payload: slices.Clone(in.raw), TemplateID: in.TemplateID, State: StatePending,
		JobID: &jobID, CreatedAt: created, UpdatedAt: created, TraceParent: parent, TraceState: state, Topic: topic}
	if !in.SendAt.IsZero() {
		at := in.SendAt
		r.SendAt = &at
	}
	return r
}

// raced takes back the rows (and jobs) just inserted under keys a prune
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
	var ids, jobIDs []int64
	for _, k := range pruned {
		if rec, ok := inserted[k]; ok {
			ids, jobIDs = append(ids, rec.ID), append(jobIDs, *rec.JobID)
			delete(inserted, k)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM sendonce_outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("outbox: take back an insert that raced a prune: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM river_job WHERE id = ANY($1)`, jobIDs); err != nil {
		return fmt.Errorf("outbox: take back an insert that raced a prune: %w", err)
	}
	return nil
}

// jobArgs is the JSON of sendjob.Args{Key: key, IntentKind: kind, RunKey:
// run}, as encoding/json writes it, written directly: a key and a run key
// hold only letters, digits, "_", ".", ":" and "-" (validKey), and a kind is
// one of four words, so nothing needs escaping.
func jobArgs(key string, kind Kind, run string) string {
	s := `{"key":"` + key + `","kind":"` + string(kind) + `"`
	if run != "" {
		s += `,"run":"` + run + `"`
	}
	return s + "}"
}

// keyHash is sendonce_key_hash(key): the first 16 bytes of the SHA-256 of
// the key's UTF-8 text, the tombstones' key.
func keyHash(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:16]
}
