package outbox_test

// Tests for the COPY path of EnqueueMany (enqueue_copy.go): a call of
// CopyMin new keys or more writes its rows with COPY in a savepoint, and
// keeps every promise of the statement it goes around. Rows a COPY wrote
// are told apart by their xmin, the subtransaction's id rather than the
// transaction's own. (SENDONCE_TEST_COPY_MIN=1 go test ./outbox/ sends the
// whole suite through the path.)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// copySize is how many intents the tests give a call that takes the COPY
// path: CopyMin, and enough for the tests' own picks when
// SENDONCE_TEST_COPY_MIN lowers it.
var copySize = max(outbox.CopyMin, 10)

// batchOf returns n intents with keys prefix:0 … prefix:n-1.
func batchOf(prefix string, n int) []outbox.Intent {
	in := make([]outbox.Intent, n)
	for i := range in {
		in[i] = outbox.Intent{Key: fmt.Sprintf("%s:%d", prefix, i), Payload: json.RawMessage(invoiceBody)}
	}
	return in
}

// keysOf returns the intents' keys.
func keysOf(in []outbox.Intent) []string {
	keys := make([]string, len(in))
	for i := range in {
		keys[i] = in[i].Key
	}
	return keys
}

// copiedIn counts, inside tx, the rows under keys that tx wrote in a
// subtransaction (a COPY's savepoint: its id comes after the
// transaction's), and those it wrote itself (the statement). The test's
// database has no other writers, and is far from wraparound.
func copiedIn(t *testing.T, tx pgx.Tx, keys []string) (copied, direct int) {
	t.Helper()
	err := tx.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE x > top), count(*) FILTER (WHERE x = top)
		FROM (SELECT xmin::text::bigint AS x, pg_current_xact_id()::text::bigint % 4294967296 AS top
			FROM sendonce_outbox WHERE idempotency_key = ANY($1)) r`, keys).Scan(&copied, &direct)
	if err != nil {
		t.Fatal(err)
	}
	return copied, direct
}

// enqueueCounting enqueues the intents in one transaction at the given
// isolation level and returns the results and how the rows went in (see
// copiedIn).
func enqueueCounting(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, iso pgx.TxIsoLevel, in []outbox.Intent) (res []*outbox.EnqueueResult, copied, direct int) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		var err error
		if res, err = ob.EnqueueMany(ctx, tx, in); err != nil {
			return err
		}
		copied, direct = copiedIn(t, tx, keysOf(in))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, copied, direct
}

// TestEnqueueManyCopiesNewKeys: a large call of new keys writes its rows
// with COPY, and returns what Get reads back (ids, times, a run's topic, a
// member's own topic, send times, templates); the drains are woken.
func TestEnqueueManyCopiesNewKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := outboxtest.New(t)
	l := listen(t, pool)
	in := batchOf("copy", copySize)
	at := outboxtest.Value[time.Time](t, pool, `SELECT date_trunc('second', now()) + interval '1 hour'`)
	in[1].SendAt, in[1].Topic = at, "news"
	in[2] = outbox.Intent{Key: "copy:template", Kind: outbox.KindTemplate, TemplateID: "welcome",
		Payload: `{"from":"shop@example.test","to":"ada@example.test"}`}
	var got []*outbox.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "copy-run", Topic: "digest", Intents: in})
		if err != nil {
			return err
		}
		got = res.Intents
		if copied, direct := copiedIn(t, tx, keysOf(in)); copied != len(in) || direct != 0 {
			t.Errorf("%d rows copied, %d inserted by the statement; want all %d copied", copied, direct, len(in))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.await(t)
	for i, r := range got {
		stored, err := ob.Get(ctx, r.Record.Key)
		if err != nil {
			t.Fatal(err)
		}
		res, want := *r.Record, *stored
		res.Payload, want.Payload = nil, nil
		if r.Existing || r.Record.Key != in[i].Key || fmt.Sprintf("%+v", recordFields(res)) != fmt.Sprintf("%+v", recordFields(want)) {
			t.Fatalf("%s: result (Existing %v)\n%+v\nstored\n%+v", in[i].Key, r.Existing, recordFields(res), recordFields(want))
		}
	}
	if got[0].Record.Topic != "digest" || got[1].Record.Topic != "news" || !got[1].Record.SendAt.Equal(at) || got[2].Record.TemplateID != "welcome" {
		t.Errorf("topics %q, %q, send at %v, template %q", got[0].Record.Topic, got[1].Record.Topic, got[1].Record.SendAt, got[2].Record.TemplateID)
	}
	if n := len(drainClaims(t, pool, "")); n != len(in)-1 {
		t.Errorf("the drain would claim %d intents, want %d (all but the one held)", n, len(in)-1)
	}
}

// TestEnqueueManyCopyGivesWay: a large call goes through the statement,
// with its answers, whenever the COPY could not keep a promise: keys
// already stored (Existing; another payload is a key reuse that writes
// nothing), a key pruned (answered from its tombstone), and a transaction
// that reads one snapshot throughout.
func TestEnqueueManyCopyGivesWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := outboxtest.New(t)
	in := batchOf("give", copySize)
	enqueueMany(t, pool, ob, in)

	res, copied, direct := enqueueCounting(t, pool, ob, pgx.ReadCommitted, in)
	for i, r := range res {
		if !r.Existing || r.Record.Key != in[i].Key {
			t.Fatalf("the same call again: result %d is %+v, Existing %v", i, r.Record, r.Existing)
		}
	}
	if copied != 0 || direct != 0 {
		t.Errorf("the same call again wrote %d rows by COPY and %d by the statement", copied, direct)
	}

	rows := countRows(t, pool)
	more := append(batchOf("give-more", copySize), outbox.Intent{Key: in[7].Key, Payload: otherInvoiceBody})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, more)
		var reuse *outbox.KeyReuseError
		if !errors.As(err, &reuse) || reuse.Key != in[7].Key || reuse.Index != len(more)-1 {
			t.Errorf("a stored key with another payload: %v, want a key reuse of %q at %d", err, in[7].Key, len(more)-1)
		}
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err != nil {
		t.Fatalf("the transaction after a key reuse: %v", err)
	}
	if n := countRows(t, pool); n != rows {
		t.Fatalf("a refused call left %d rows, want %d", n, rows)
	}

	settleSent(t, pool, in[3].Key)
	pruneAll(t, pool, in[3].Key)
	again := append(batchOf("give-pruned", copySize), in[3])
	res, copied, direct = enqueueCounting(t, pool, ob, pgx.ReadCommitted, again)
	last := res[len(res)-1]
	if !last.Existing || last.Record.PrunedAt == nil || last.Record.State != outbox.StateSent {
		t.Errorf("a pruned key: Existing %v, pruned at %v, state %s; want the pruned intent, sent", last.Existing, last.Record.PrunedAt, last.Record.State)
	}
	if copied != 0 || direct != len(again)-1 {
		t.Errorf("beside a pruned key, %d rows copied and %d inserted by the statement; want %d by the statement", copied, direct, len(again)-1)
	}

	for n, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		batch := batchOf(fmt.Sprintf("give-iso%d", n), copySize)
		if _, copied, direct := enqueueCounting(t, pool, ob, iso, batch); copied != 0 || direct != len(batch) {
			t.Errorf("%s: %d rows copied, %d inserted by the statement; want all by the statement (snapshotCheck)", iso, copied, direct)
		}
	}
}

// TestEnqueueManyCopyWaitsForAnotherTransaction: a large call whose key
// another transaction holds uncommitted waits for it, as the statement
// does; when that transaction commits, the key is Existing and the rest go
// in; when it rolls back, the key goes in too. The caller's transaction
// stays usable either way.
func TestEnqueueManyCopyWaitsForAnotherTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := outboxtest.New(t)
	for _, commit := range []bool{true, false} {
		in := batchOf(fmt.Sprintf("wait-%v", commit), copySize)
		held := in[len(in)/2]
		other, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Enqueue(ctx, other, held); err != nil {
			t.Fatal(err)
		}
		done := make(chan []*outbox.EnqueueResult, 1)
		go func() {
			var res []*outbox.EnqueueResult
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				if res, err = ob.EnqueueMany(ctx, tx, in); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `SELECT 1`)
				return err
			})
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		awaitLockWaits(t, pool, 1)
		if commit {
			err = other.Commit(ctx)
		} else {
			err = other.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res == nil {
			t.FailNow()
		}
		if r := res[len(in)/2]; r.Existing != commit {
			t.Errorf("commit %v: the held key is Existing %v", commit, r.Existing)
		}
		if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = ANY($1)`, keysOf(in)); n != len(in) {
			t.Errorf("commit %v: %d rows, want %d", commit, n, len(in))
		}
	}
}

// TestEnqueueManyCopiesAtMostMaxCopiesPerTransaction: one transaction
// makes at most MaxCopies COPYs, each a subtransaction, so that it never
// holds more than PostgreSQL caches (64); its later calls use the
// statement.
func TestEnqueueManyCopiesAtMostMaxCopiesPerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := outboxtest.New(t)
	calls := outbox.MaxCopies + 5
	var subtransactions int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var keys []string
		for c := range calls {
			in := batchOf(fmt.Sprintf("cap%d", c), copySize)
			if _, err := ob.EnqueueMany(ctx, tx, in); err != nil {
				return err
			}
			keys = append(keys, keysOf(in)...)
		}
		return tx.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FILTER (WHERE xmin::text <> (pg_current_xact_id()::text::bigint % 4294967296)::text)
			FROM sendonce_outbox WHERE idempotency_key = ANY($1)`, keys).Scan(&subtransactions) // every row is this transaction's
	})
	if err != nil {
		t.Fatal(err)
	}
	if subtransactions != outbox.MaxCopies {
		t.Fatalf("%d calls in one transaction wrote in %d subtransactions, want %d", calls, subtransactions, outbox.MaxCopies)
	}
	if n := countRows(t, pool); n != calls*copySize {
		t.Fatalf("%d rows, want %d", n, calls*copySize)
	}
}

// TestEnqueueManyCopyStoresWhatTheStatementStores: the rows the COPY
// writes in PostgreSQL's binary format (appendCopyRows) hold what the
// statement's rows hold, column by column, for values of every column it
// writes: send times to the microsecond (and below it, truncated), before
// 2000 and far ahead, text beyond ASCII, payloads with escapes, a topic,
// a run and its tenant, the trace context of the caller's span.
func TestEnqueueManyCopyStoresWhatTheStatementStores(t *testing.T) {
	t.Parallel()
	ctx := spanCtx(t, "vendor=a")
	pool, ob := outboxtest.New(t)
	// The columns of appendCopyRows are the table's types.
	rows, err := pool.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_name = 'sendonce_outbox' AND column_name = ANY($1) ORDER BY array_position($1, column_name::text)`, outbox.CopyColumns)
	if err != nil {
		t.Fatal(err)
	}
	types, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name, typ string
		err := r.Scan(&name, &typ)
		return name + " " + typ, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"id bigint", "idempotency_key text", "kind text", "payload jsonb", "template_id text", "send_at timestamp with time zone",
		"run_key text", "traceparent text", "tracestate text", "topic text", "queue text", "checked boolean", "tenant text"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("the COPY's columns are %q, appendCopyRows writes %q", types, want)
	}

	intents := func(prefix string) []outbox.Intent {
		in := batchOf(prefix, copySize)
		in[0].SendAt = time.Date(2027, 3, 4, 5, 6, 7, 123456789, time.FixedZone("", -5*3600))
		in[1].SendAt = time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)
		in[2].SendAt = time.Date(2999, 1, 1, 0, 0, 0, 1000, time.UTC)
		in[3].Topic = "news"
		in[4] = outbox.Intent{Key: prefix + ":template", Kind: outbox.KindTemplate, TemplateID: "bienvenue-é-✓",
			Payload: `{"from":"Zoë <shop@example.test>","to":"ada@example.test","subject":"\u00e9t\u00e9 \ud83d\ude00 \"q\"\\"}`}
		in[5] = outbox.Intent{Key: prefix + ":batch", Kind: outbox.KindBatch,
			Payload: `{"emails":[{"from":"shop@example.test","to":["ada@example.test"],"text":"x"}]}`}
		in[6].Payload = json.RawMessage(` { "from" : "shop@example.test", "to" : ["ada@example.test"], "text" : "spaced", "n" : 1.50 } `)
		return in
	}
	for _, p := range []struct {
		prefix string
		iso    pgx.TxIsoLevel
		copies bool
	}{{"copied", pgx.ReadCommitted, true}, {"inserted", pgx.RepeatableRead, false}} {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: p.iso}, func(tx pgx.Tx) error {
			in := intents(p.prefix)
			if _, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "run-" + p.prefix, Topic: "digest", Tenant: "acme", Intents: in}); err != nil {
				return err
			}
			if copied, _ := copiedIn(t, tx, keysOf(in)); (copied == len(in)) != p.copies {
				t.Errorf("%s: %d of %d rows copied", p.prefix, copied, len(in))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var differ []string
	err = pool.QueryRow(ctx, `SELECT coalesce(array_agg(c.idempotency_key ORDER BY c.idempotency_key), '{}') FROM sendonce_outbox c
		JOIN sendonce_outbox i ON i.idempotency_key = 'inserted' || substr(c.idempotency_key, 7)
		WHERE c.idempotency_key LIKE 'copied:%' AND
			(c.kind, c.payload, c.template_id, c.send_at, c.run_key, c.traceparent, c.tracestate, c.topic, c.queue, c.checked, c.state, c.tenant)
			IS DISTINCT FROM
			(i.kind, i.payload, i.template_id, i.send_at, replace(i.run_key, 'inserted', 'copied'), i.traceparent, i.tracestate, i.topic, i.queue, i.checked, i.state, i.tenant)`).Scan(&differ)
	if err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key LIKE 'copied:%' AND traceparent = $1`, wantParent); n != copySize {
		t.Errorf("%d copied rows carry the span's trace context, want %d", n, copySize)
	}
	if len(differ) > 0 {
		t.Errorf("the COPY stored these rows otherwise than the statement: %q", differ)
	}
}

// TestEnqueueManyCopyResultsOwnTheirPayloads: the results of a COPY share
// one buffer of payloads, each its own part of it: the caller's []byte
// changing afterwards changes none of them, nor does an append to one
// change the next.
func TestEnqueueManyCopyResultsOwnTheirPayloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := outboxtest.New(t)
	in := batchOf("own", copySize)
	bufs := make([][]byte, len(in))
	for i := range in {
		bufs[i] = []byte(invoiceBody)
		in[i].Payload = bufs[i]
	}
	var got []*outbox.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		got, err = ob.EnqueueMany(ctx, tx, in)
		if copied, _ := copiedIn(t, tx, keysOf(in)); copied != len(in) {
			t.Errorf("%d of %d rows copied", copied, len(in))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bufs {
		copy(b, strings.Repeat("x", len(b)))
	}
	_ = append(got[0].Record.Payload, "tail"...)
	for i, r := range got {
		if string(r.Record.Payload) != invoiceBody {
			t.Fatalf("result %d: payload %s, want %s", i, r.Record.Payload, invoiceBody)
		}
	}
}
