package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/schemaerr"
	"github.com/sendonce/sendonce/internal/base/store"
)

// EnqueueResult is what Enqueue did.
type EnqueueResult struct {
	// Record is the stored intent. For an intent inserted now, its Payload
	// is the JSON text given, which the database stores as jsonb: the same
	// value, in the database's spelling (key order, spacing) when read back
	// with Get.
	Record *Record
	// Existing is true when an intent with the same key and the same
	// payload was already there: nothing was inserted, and Record is that
	// intent in its current state. For an intent pruned since (see
	// Record.PrunedAt), Record holds the key, what was enqueued now (the
	// same intent) and the final state the pruned one had.
	Existing bool
}

// Enqueue writes an intent's row in the caller's transaction, so the send
// commits or rolls back with the application's own rows. The row is all
// there is of it: no River job per intent; the workers' drains claim it
// when it is due.
//
// An intent whose key is already in the outbox with the same kind, template
// and payload is not inserted again: Enqueue returns the existing one with
// Existing set. With a different payload it returns a *KeyReuseError. An
// invalid intent returns an *InvalidError: an empty key is one (give
// RandomKey() for a random key), and so is a key holding a clock reading
// (ClockPattern). In both cases nothing is written and the caller's
// transaction is left usable.
//
// In a REPEATABLE READ or SERIALIZABLE transaction, a key enqueued or
// pruned by a transaction that committed after tx's snapshot was taken
// fails with a serialization failure: the error wraps the database's
// *pgconn.PgError with SQLSTATE 40001, the transaction is aborted, and
// nothing of it is written. Retry the transaction: its new snapshot sees
// the key, and Enqueue answers as ever. (Read from the old snapshot, a
// pruned key would look new, and its intent would be sent again.)
//
// When ctx carries an OpenTelemetry span, its W3C trace context is stored
// with the intent (Record.TraceParent), and the worker's send span links
// to it.
//
// On a database that was not migrated, or only in part, the error matches
// migrations.ErrPending (errors.Is), and its text says to run `sendonce
// migrate` or migrations.Up; the transaction is aborted.
//
// Through a connection pooler in transaction mode (PgBouncer), Enqueue's
// own statements work whatever the pool's default query mode: behind a
// pooler they name no prepared statement (the first call on a connection
// asks the server which session it talks to). The caller's own statements
// in tx run in the pool's mode, so through PgBouncer before 1.21 the pool
// needs default_query_exec_mode=exec in its URL (or
// pgx.QueryExecModeExec) for them.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, in Intent) (*EnqueueResult, error) {
	res, err := o.EnqueueMany(ctx, tx, []Intent{in})
	if err != nil {
		var inv *InvalidError
		if errors.As(err, &inv) {
			inv.Index = -1
		}
		var reuse *KeyReuseError
		if errors.As(err, &reuse) {
			reuse.Index = -1
		}
		return nil, err
	}
	return res[0], nil
}

// EnqueueMany is Enqueue for many intents at once: one statement writes all
// their rows, in one round trip to the database (see insertSQL). A call of
// 200 new keys or more, in a READ COMMITTED transaction, writes them with
// COPY instead: the same rows and answers, faster. The COPY runs in a
// savepoint of tx (a subtransaction, released before EnqueueMany returns,
// or rolled back when a key turns out stored, and the statement answers);
// a transaction makes at most 32 of them, and its later calls use the
// statement (see copyIn).
// The intents are all validated before anything is written; an error about
// one names its index. All of them get the trace context of ctx's span. On
// an unmigrated database it fails as Enqueue does, with migrations.ErrPending.
func (o *Outbox) EnqueueMany(ctx context.Context, tx pgx.Tx, intents []Intent) ([]*EnqueueResult, error) {
	if len(intents) == 0 {
		return nil, nil
	}
	prepared, byKey, dups, err := prepare(intents)
	if err != nil {
		return nil, err
	}
	ptx, err := forProducer(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := sameAsFirst(ctx, ptx, prepared, dups); err != nil {
		return nil, schemaerr.Wrap("outbox: enqueue", err)
	}

	// Insert optimistically: a new key is the common case. Keys already
	// stored are found by ON CONFLICT, and only then compared. Rows go in in
	// key order, so two transactions enqueueing overlapping keys wait for
	// each other in the same order and never deadlock.
	var fresh []int // the index of the first intent of each key
	for i := range prepared {
		if byKey[prepared[i].Key] == i {
			fresh = append(fresh, i)
		}
	}
	slices.SortFunc(fresh, func(a, b int) int { return strings.Compare(prepared[a].Key, prepared[b].Key) })
	results := make([]*EnqueueResult, len(prepared))
	if err := o.insert(ctx, ptx, prepared, fresh, results); err != nil {
		// A database without sendonce's schema (or River's) fails here; the
		// error says so after the fact, so no call pays for a check first.
		return nil, schemaerr.Wrap("outbox: enqueue", err)
	}
	// A key given twice with the same payload answers the first one's row.
	for i := range prepared {
		if results[i] == nil {
			first := results[byKey[prepared[i].Key]]
			results[i] = &EnqueueResult{Record: first.Record, Existing: true}
		}
	}
	return results, nil
}

// prepare validates the intents, and returns them with their kind and
// payload text filled in, the index of each key's first intent, and the
// pairs of indexes (first, later) of the intents that repeat a key.
func prepare(intents []Intent) (prepared []Intent, byKey map[string]int, dups [][2]int, _ error) {
	prepared = make([]Intent, len(intents))
	byKey = make(map[string]int, len(intents))
	members := make(jsonObject, 0, 8) // the payloads' members, one at a time
	for i, in := range intents {
		raw, err := in.validate(members)
		if err != nil {
			var inv *InvalidError
			if errors.As(err, &inv) {
				inv.Index = i
			}
			return nil, nil, nil, err
		}
		in.Kind, in.raw = in.kind(), raw
		if j, dup := byKey[in.Key]; !dup {
			byKey[in.Key] = i
		} else {
			dups = append(dups, [2]int{j, i})
		}
		prepared[i] = in
	}
	return prepared, byKey, dups, nil
}

type existingRecord struct {
	record *Record
	err    error // non-nil when the stored intent differs
}

// findExisting loads the intents already stored under any of the keys, and
// compares each with what is being enqueued. The comparison runs in SQL, so
// that two JSON texts equal as jsonb (key order, spacing) count as the same.
func (o *Outbox) findExisting(ctx context.Context, tx producerTx, in []Intent, keys []string) (map[string]existingRecord, error) {
	kinds, payloads, templates, _ := columnsOf(in)
	found := map[string]existingRecord{}
	err := store.FindIntents(ctx, tx, keys, kinds, payloads, templates, func(row *store.Intent, same bool) {
		rec := record(row)
		e := existingRecord{record: rec}
		if !same {
			e.err = ErrKeyReuse
		}
		// The first comparison for a key decides; duplicates in the input
		// were already checked against each other.
		if _, seen := found[rec.Key]; !seen {
			found[rec.Key] = e
		}
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: look up existing keys: %w", err)
	}
	var rest []Intent
	var restKeys []string
	for i, k := range keys {
		if _, ok := found[k]; !ok {
			rest, restKeys = append(rest, in[i]), append(restKeys, k)
		}
	}
	if len(rest) == 0 {
		return found, nil
	}
	return found, findPruned(ctx, tx, rest, restKeys, found)
}

// findPruned answers keys whose intent was pruned from their tombstones:
// the same intent (kind, template and payload hash alike) is the pruned one,
// in its final state; another is a key reuse.
func findPruned(ctx context.Context, tx producerTx, in []Intent, keys []string, found map[string]existingRecord) error {
	kinds, payloads, templates, _ := columnsOf(in)
	byKey := make(map[string]int, len(keys))
	for i, k := range keys {
		byKey[k] = i
	}
	err := store.FindTombstones(ctx, tx, keys, kinds, payloads, templates, func(key, state string, at time.Time, same bool) {
		i := byKey[key]
		rec := &Record{Key: key, Kind: in[i].Kind, Payload: in[i].raw, TemplateID: in[i].TemplateID, State: State(state), PrunedAt: &at}
		e := existingRecord{record: rec}
		if !same {
			e.err = ErrKeyReuse
		}
		if _, seen := found[key]; !seen {
			found[key] = e
		}
	})
	if err != nil {
		return fmt.Errorf("outbox: look up pruned keys: %w", err)
	}
	return nil
}

// settleExisting handles the keys that were already stored (or that a
// concurrent transaction committed first), which got no row: each answers with the stored intent when it is the same intent, or
// a *KeyReuseError when it is not.
func (o *Outbox) settleExisting(ctx context.Context, tx producerTx, in []Intent, idx []int, inserted map[string]*Record, results []*EnqueueResult) error {
	var lost []Intent
	var lostKeys []string
	for _, i := range idx {
		if rec, ok := inserted[in[i].Key]; ok {
			results[i] = &EnqueueResult{Record: rec}
			continue
		}
		lost = append(lost, in[i])
		lostKeys = append(lostKeys, in[i].Key)
	}
	existing, err := o.findExisting(ctx, tx, lost, lostKeys)
	if err != nil {
		return err
	}
	for _, i := range idx {
		if results[i] != nil {
			continue
		}
		if rec, ok := existing[in[i].Key]; !ok || rec.err != nil {
			// Nothing may stay written: take back this call's rows.
			var ids []int64
			for _, rec := range inserted {
				ids = append(ids, rec.ID)
			}
			if err := store.TakeBackIntents(ctx, tx, ids); err != nil {
				return fmt.Errorf("outbox: undo insert: %w", err)
			}
			return &KeyReuseError{Key: in[i].Key, Index: i}
		}
	}
	for _, i := range idx {
		if results[i] == nil {
			results[i] = &EnqueueResult{Record: existing[in[i].Key].record, Existing: true}
		}
	}
	return nil
}

func columnsOf(in []Intent) (kinds []string, payloads []string, templates []*string, sendAts []*time.Time) {
	kinds = make([]string, len(in))
	payloads = make([]string, len(in))
	templates = make([]*string, len(in))
	sendAts = make([]*time.Time, len(in))
	for i := range in {
		kinds[i] = string(in[i].Kind)
		payloads[i] = string(in[i].raw)
		if in[i].TemplateID != "" {
			templates[i] = &in[i].TemplateID
		}
		if !in[i].SendAt.IsZero() {
			sendAts[i] = &in[i].SendAt
		}
	}
	return kinds, payloads, templates, sendAts
}

// sameAsFirst checks that intents of one call that repeat a key are the
// same intent as its first one: the same kind and template, and payloads
// equal as jsonb (key order and spacing aside), as for an intent already
// stored.
func sameAsFirst(ctx context.Context, tx producerTx, in []Intent, dups [][2]int) error {
	var firsts, laters []string
	var idx []int
	for _, d := range dups {
		a, b := &in[d[0]], &in[d[1]]
		if a.Kind != b.Kind || a.TemplateID != b.TemplateID {
			return &KeyReuseError{Key: b.Key, Index: d[1]}
		}
		if string(a.raw) != string(b.raw) {
			firsts, laters = append(firsts, string(a.raw)), append(laters, string(b.raw))
			idx = append(idx, d[1])
		}
	}
	if len(idx) == 0 {
		return nil
	}
	differ, err := store.ComparePayloads(ctx, tx, firsts, laters)
	if err != nil {
		return fmt.Errorf("outbox: compare payloads: %w", err)
	}
	if len(differ) > 0 {
		i := idx[differ[0]]
		return &KeyReuseError{Key: in[i].Key, Index: i}
	}
	return nil
}
