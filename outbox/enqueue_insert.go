package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
)

// How EnqueueMany writes (issues 15 and 44). One statement inserts the
// outbox rows, and tells the workers' drains of them: one round trip per
// call however many intents it has. (A key already stored costs one lookup
// more; a refused call one statement to take back what it wrote.) A large
// call of new keys is written with COPY instead (enqueue_copy.go), and
// comes here whenever COPY could not keep one of this statement's promises.
// The statements are package store's (store.InsertIntents and its
// neighbours, in store/outbox_enqueue.go), with the comments that explain
// them; the comments here name them as store does, without its "outbox"
// prefix: insertSQL (store's outboxInsertSQL), notifySQL, prunedSQL, and
// for the COPY path precheckSQL, postcheckSQL and copySQL.
//
// An intent is its row alone: no River job per intent. The workers' drains
// claim due rows of their queue (job_id NULL) in batches. The rows are
// marked checked: EnqueueMany has validated each intent in Go, and the
// statement (with raced and snapshotCheck) makes the checks the triggers
// for plain-SQL producers make (tombstones, the snapshot; a canceled run
// is refused by EnqueueRun first), so those triggers skip them (migration
// 00025).

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
	var tenants []string // nil when no intent names a tenant
	for n := range batch {
		topics[n] = batch[n].Topic
		if batch[n].Tenant != "" && tenants == nil {
			tenants = make([]string, len(batch))
		}
		if tenants != nil {
			tenants[n] = batch[n].Tenant
		}
	}
	parent, state := traceContext(ctx)
	inserted, seen, snapshot, err := scanInserted(ctx, tx, batch, parent, state, &store.InsertIntentsArgs{
		Keys: keys, Kinds: kinds, Payloads: payloads, Templates: templates, SendAts: sendAts, Run: run,
		TraceParent: parent, TraceState: state, Announce: announce, Topics: topics, KeyHashes: hashes, Queue: o.queue,
		Tenants: tenants})
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

// scanInserted runs insertSQL with a and reads the rows it inserted, by
// key, as Records of the intents in batch (see newRecord), the keys of
// those whose statement saw a row under the key already (see raced), and
// whether the transaction reads one snapshot throughout (REPEATABLE READ or
// SERIALIZABLE; see snapshotCheck).
func scanInserted(ctx context.Context, tx producerTx, batch []Intent, parent, state string, a *store.InsertIntentsArgs) (inserted map[string]*Record, seen []string, snapshot bool, _ error) {
	byKey := make(map[string]*Intent, len(batch))
	for i := range batch {
		byKey[batch[i].Key] = &batch[i]
	}
	inserted = make(map[string]*Record, len(batch))
	snapshot, err := store.InsertIntents(ctx, tx, a, func(r store.InsertedIntent) error {
		in := byKey[r.Key]
		if in == nil {
			return fmt.Errorf("outbox: the insert returned key %q, which was not enqueued", r.Key)
		}
		inserted[r.Key] = newRecord(in, r.ID, r.CreatedAt, r.Topic, parent, state)
		if r.Seen {
			seen = append(seen, r.Key)
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	return inserted, seen, snapshot, nil
}

// newRecord is the Record of intent in as insertSQL stored it: pending, with
// the id, creation time and topic the database gave it, the trace context
// of the caller's span, and its tenant (a run member's is its run's
// already: see EnqueueRun). Its Payload is the text given, which
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
		CreatedAt: created, UpdatedAt: created, TraceParent: parent, TraceState: state, Topic: topic, Tenant: in.Tenant}
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
	pruned, err := store.PrunedKeys(ctx, tx, seen)
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
	if err := store.TakeBackIntents(ctx, tx, ids); err != nil {
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
