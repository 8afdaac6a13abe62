package sendstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

const otherBody = `{"from":"billing@example.com","to":["ada@example.com"],"subject":"Invoice inv_4193","text":"Attached."}`

// settle puts intents in a final state, last updated age ago, with their
// jobs finished, as a worker leaves them.
func settle(t *testing.T, pool *pgxpool.Pool, state string, age time.Duration, keys ...string) {
	t.Helper()
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = $1, updated_at = now() - $2::float8 * interval '1 second', created_at = now() - $2::float8 * interval '1 second'
		WHERE idempotency_key = ANY($3)`, state, age.Seconds(), keys)
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE id IN (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = ANY($1))`, keys)
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	return int(outboxtest.Value[int64](t, pool, sql, args...))
}

func TestPruneKeepsWhatMustStay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, _ := setup(t, "sent:old", "failed:old", "canceled:old", "pending", "sent:job-alive", "sent:in-batch", "sent:in-batch-2")
	// An intent whose own River job has not finished, as in a database
	// upgraded from a release before the drain: it stays while the job may
	// still run.
	outboxtest.GiveJobs(t, pool, "sent:job-alive")
	// Created two hours ago (Prune reads rows in id order up to the first
	// one created within the retention).
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET created_at = now() - interval '2 hours'`)
	settle(t, pool, "sent", 2*time.Hour, "sent:old", "sent:in-batch", "sent:in-batch-2")
	settle(t, pool, "failed", 2*time.Hour, "failed:old")
	settle(t, pool, "canceled", 2*time.Hour, "canceled:old")
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', updated_at = now() - interval '2 hours', created_at = now() - interval '2 hours' WHERE idempotency_key = 'sent:job-alive'`)
	// A batch still sending, with its members' outcomes written already.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, state)
		VALUES ('sendonce-batch:b1', 'sendonce', '{}', '{sent:in-batch,sent:in-batch-2}', 'sending')`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET batch_key = 'sendonce-batch:b1' WHERE idempotency_key LIKE 'sent:in-batch%'`)
	// A run with one member sent long ago and one still pending.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "billing:2026-11", Intents: []outbox.Intent{
			{Key: "run:sent", Payload: json.RawMessage(outboxtest.InvoiceBody)},
			{Key: "run:pending", Payload: json.RawMessage(outboxtest.InvoiceBody)}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET created_at = now() - interval '2 hours' WHERE run_key IS NOT NULL`)
	settle(t, pool, "sent", 2*time.Hour, "run:sent")
	// Settled within the retention (the newest row: ids follow creation).
	enqueue(t, pool, ob, "sent:new")
	settle(t, pool, "sent", time.Minute, "sent:new")
	// A delivery event of a pruned intent goes with it.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_event (delivery_id, event_id, type, email_id, occurred_at, raw, intent_id)
		SELECT 'd1', 'e1', 'email.delivered', 'msg_1', now(), '{}', id FROM sendonce_outbox WHERE idempotency_key = 'sent:old'`)

	res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Intents != 3 || res.Events != 1 {
		t.Fatalf("pruned %+v, want 3 intents and 1 event", res)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT idempotency_key FROM sendonce_outbox ORDER BY idempotency_key`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := "pending run:pending run:sent sent:in-batch sent:in-batch-2 sent:job-alive sent:new"
	if strings.Join(left, " ") != want {
		t.Fatalf("left %v, want %s", left, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_tombstone`); n != 3 {
		t.Fatalf("%d tombstones, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_event`); n != 0 {
		t.Fatalf("%d events left, want 0", n)
	}
	if st := outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash('failed:old')`); st != "failed" {
		t.Fatalf("tombstone of failed:old says %q", st)
	}

	// Once the batch and the run are settled, their members go, then the
	// batch and the run themselves.
	pgtest.Exec(t, pool, `UPDATE sendonce_batch SET state = 'sent', updated_at = now() - interval '2 hours'`)
	settle(t, pool, "sent", 2*time.Hour, "run:pending")
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET updated_at = now() - interval '2 hours'`)
	res, err = sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Intents != 4 || res.Batches != 1 || res.Runs != 1 {
		t.Fatalf("pruned %+v, want 4 intents, 1 batch, 1 run", res)
	}
}

func TestPrunedKeyIsExistingOrKeyReuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, _ := setup(t, "p:1", "p:2", "p:3")
	settle(t, pool, "sent", time.Hour, "p:1", "p:2", "p:3")
	if res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{}); err != nil || res.Intents != 3 {
		t.Fatalf("Prune = %+v, %v; want 3 intents", res, err)
	}

	// Enqueue: the same payload, keys in another order and spacing.
	same := `{"text":"Attached.", "subject":"Invoice inv_4192","to":["ada@example.com"],"from":"billing@example.com"}`
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "p:1", Payload: same})
		if err != nil {
			return err
		}
		if !res.Existing || res.Record.PrunedAt == nil || res.Record.State != outbox.StateSent {
			t.Errorf("Enqueue of a pruned key = %+v (record %+v), want Existing, pruned, sent", res, res.Record)
		}
		_, err = ob.Enqueue(ctx, tx, outbox.Intent{Key: "p:2", Payload: otherBody})
		var reuse *outbox.KeyReuseError
		if !errors.As(err, &reuse) || reuse.Key != "p:2" {
			t.Errorf("Enqueue of a pruned key with another payload = %v, want a KeyReuseError", err)
		}
		// Another kind is another intent, too.
		_, err = ob.Enqueue(ctx, tx, outbox.Intent{Key: "p:3", Kind: outbox.KindTemplate, TemplateID: "tpl", Payload: outboxtest.InvoiceBody})
		if !errors.Is(err, outbox.ErrKeyReuse) {
			t.Errorf("Enqueue of a pruned key as a template = %v, want ErrKeyReuse", err)
		}
		// EnqueueMany: new keys go in, pruned ones answer from the tombstone.
		many, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{{Key: "p:new", Payload: outboxtest.InvoiceBody},
			{Key: "p:3", Payload: outboxtest.InvoiceBody}})
		if err != nil {
			return err
		}
		if many[0].Existing || many[0].Record.ID == 0 || !many[1].Existing || many[1].Record.PrunedAt == nil {
			t.Errorf("EnqueueMany = %+v, %+v; want p:new inserted, p:3 existing and pruned", many[0], many[1])
		}
		_, err = ob.EnqueueMany(ctx, tx, []outbox.Intent{{Key: "p:new2", Payload: outboxtest.InvoiceBody},
			{Key: "p:2", Payload: otherBody}})
		if !errors.As(err, &reuse) || reuse.Index != 1 {
			t.Errorf("EnqueueMany with a reused pruned key = %v, want a KeyReuseError at index 1", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 1 {
		t.Fatalf("%d rows, want only p:new", n)
	}
	// p:new went in as an intent of the drain: no River job, pending and
	// due.
	if n := count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("%d River jobs, want none: the drain sends p:new", n)
	}
	if rec := get(t, pool, "p:new"); rec.State != outbox.StatePending || rec.JobID != nil {
		t.Fatalf("p:new: %+v, want pending with no job", rec)
	}
	if due, err := sendstate.AnyDue(ctx, pool, "", 0); err != nil || !due {
		t.Fatalf("AnyDue = %v, %v; want p:new due on the drain", due, err)
	}

	// The plain-SQL contract: the same intent is skipped like a live key,
	// another is refused with the key named.
	tag, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('p:1', 'email', $1)
		ON CONFLICT (idempotency_key) DO NOTHING`, same)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("plain INSERT of a pruned key = %v, %v; want 0 rows", tag, err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('p:2', 'email', $1)
		ON CONFLICT (idempotency_key) DO NOTHING`, otherBody)
	if err == nil || !strings.Contains(err.Error(), `idempotency key 'p:2' is already used`) {
		t.Fatalf("plain INSERT of a pruned key with another payload = %v, want a key-reuse error naming it", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 1 {
		t.Fatalf("%d rows, want only p:new", n)
	}
}

// awaitLockWait waits until some session waits for a lock.
func awaitLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no session waits for the prune's lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An enqueue that waits for a prune of its key on the key's unique index
// goes in when the prune commits; it must see the tombstone and take the
// row back.
func TestEnqueueRacingAPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, _ := setup(t, "race:go", "race:sql", "race:sql-other")
	settle(t, pool, "sent", time.Hour, "race:go", "race:sql", "race:sql-other")

	for _, tc := range []struct {
		key     string
		enqueue func() error
	}{
		{"race:go", func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "race:go", Payload: outboxtest.InvoiceBody})
				if err == nil && (!res.Existing || res.Record.PrunedAt == nil) {
					t.Errorf("Enqueue racing a prune = %+v, want Existing and pruned", res)
				}
				return err
			})
		}},
		{"race:sql", func() error {
			tag, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('race:sql', 'email', $1)
				ON CONFLICT (idempotency_key) DO NOTHING`, outboxtest.InvoiceBody)
			// The row went in and the trigger after it took it back: the
			// command tag still counts it (integration's TestRetention
			// tells the two apart by looking for the row).
			if err == nil && tag.RowsAffected() != 1 {
				t.Errorf("plain INSERT racing a prune: command tag %q, want INSERT 0 1 (the row the trigger takes back)", tag)
			}
			return err
		}},
		{"race:sql-other", func() error {
			_, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('race:sql-other', 'email', $1)
				ON CONFLICT (idempotency_key) DO NOTHING`, otherBody)
			if err == nil || !strings.Contains(err.Error(), "already used") {
				t.Errorf("plain INSERT with another payload racing a prune = %v, want a key-reuse error", err)
			}
			return nil
		}},
	} {
		prune := outboxtest.PruneOpen(t, pool, tc.key)
		done := make(chan error, 1)
		go func() { done <- tc.enqueue() }()
		awaitLockWait(t, pool)
		if err := prune.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = $1`, tc.key); n != 0 {
			t.Fatalf("%s: %d rows after an enqueue raced its prune, want 0", tc.key, n)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE state = 'available'`); n != 0 {
		t.Fatalf("%d available jobs, want 0", n)
	}
}

func TestPruneTombstonesPastRetainKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t, "k:1", "k:2")
	settle(t, pool, "sent", time.Hour, "k:1", "k:2")
	if _, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{RetainKeys: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_tombstone SET pruned_at = now() - interval '2 hours' WHERE key_hash = sendonce_key_hash('k:1')`)
	// RetainKeys 0 keeps them for ever.
	if res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{}); err != nil || res.Tombstones != 0 {
		t.Fatalf("Prune without RetainKeys = %+v, %v; want no tombstone deleted", res, err)
	}
	res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{RetainKeys: time.Hour})
	if err != nil || res.Tombstones != 1 {
		t.Fatalf("Prune = %+v, %v; want 1 tombstone deleted", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash('k:2')`); n != 1 {
		t.Fatal("k:2's tombstone is gone")
	}
	if _, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: -time.Second}); err == nil {
		t.Fatal("Prune with a negative retention did not fail")
	}
}

// TestPruneUnsubscribeEventsPastRetainKeys: the history of unsubscribes
// goes with RetainKeys; who is unsubscribed now stays.
func TestPruneUnsubscribeEventsPastRetainKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_unsubscribe (address, topic, source) VALUES ('ada@example.com', 'digest', 'one-click')`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_unsubscribe_event (address, topic, action, source, created_at) VALUES
		('ada@example.com', 'digest', 'unsubscribed', 'one-click', now() - interval '2 hours'),
		('bob@example.com', 'digest', 'unsubscribed', 'manual', now() - interval '3 hours'),
		('bob@example.com', 'digest', 'resubscribed', 'manual', now() - interval '10 minutes')`)
	if res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{}); err != nil || res.UnsubscribeEvents != 0 {
		t.Fatalf("Prune without RetainKeys = %+v, %v; want no unsubscribe event deleted", res, err)
	}
	res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{RetainKeys: time.Hour, BatchSize: 1})
	if err != nil || res.UnsubscribeEvents != 2 {
		t.Fatalf("Prune = %+v, %v; want 2 unsubscribe events deleted", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_unsubscribe_event WHERE action = 'resubscribed'`); n != 1 {
		t.Fatalf("%d events of the last hour left, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_unsubscribe`); n != 1 {
		t.Fatalf("%d addresses unsubscribed after the prune, want 1 (only the history goes)", n)
	}
}

// TestPruneYieldsToSends: while an intent is being sent, Prune rests
// between its transactions (PruneOptions.Yield), and says how long; with
// nothing being sent it does not rest. It deletes the same either way.
func TestPruneYieldsToSends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t, "old:1", "old:2", "old:3", "old:4", "in-flight")
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET created_at = now() - interval '2 hours'`)
	settle(t, pool, "sent", 2*time.Hour, "old:1", "old:2")
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sending', attempts = 1, first_attempt_at = now() WHERE idempotency_key = 'in-flight'`)

	res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: time.Hour, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Intents != 2 || res.Rested <= 0 {
		t.Fatalf("with a send in flight: pruned %+v, want 2 intents and a rest between the transactions", res)
	}

	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', updated_at = now() WHERE idempotency_key = 'in-flight'`)
	settle(t, pool, "sent", 2*time.Hour, "old:3", "old:4")
	res, err = sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: time.Hour, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Intents != 2 || res.Rested != 0 {
		t.Fatalf("with nothing in flight: pruned %+v, want 2 intents and no rest", res)
	}
}

// TestPruneBoundReadsAFewRows: the end of the ids a Prune reads (the
// first id created at or after the cutoff) is found by probes of the
// primary key, not by reading every row older than the cutoff: that read
// took 1.5-2 s with 3,000,000 rows of history, before the first
// transaction and without resting, beside a drain (issue 26). The answer
// is the same: the first id created at or after the cutoff, one past the
// last id when every row is older, 0 on an empty table.
func TestPruneBoundReadsAFewRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	ago := func(d string) time.Time {
		t.Helper()
		return outboxtest.Value[time.Time](t, pool, `SELECT now() - $1::interval`, d)
	}
	bound := func(cutoff time.Time) int64 {
		t.Helper()
		return outboxtest.Value[int64](t, pool, sendstate.PruneBoundSQL, cutoff)
	}
	if got := bound(ago("1 hour")); got != 0 {
		t.Fatalf("bound on an empty outbox %d, want 0", got)
	}
	// 40,000 rows created two days ago, then 10,000 created in the last
	// hour, a minute apart in id order.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, job_id, created_at, updated_at, state)
		SELECT 'h:' || g, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}', g,
			CASE WHEN g <= 40000 THEN now() - interval '2 days' + g * interval '1 ms' ELSE now() - interval '1 hour' + (g - 40000) * interval '300 ms' END,
			now() - interval '2 days', 'sent'
		FROM generate_series(1, 50000) g`)
	pgtest.Exec(t, pool, `VACUUM ANALYZE sendonce_outbox`)
	check := func(what string) {
		t.Helper()
		for _, d := range []string{"3 days", "1 day", "30 minutes", "1 second"} {
			cutoff := ago(d)
			want := outboxtest.Value[int64](t, pool, `SELECT coalesce(
				(SELECT min(id) FROM sendonce_outbox WHERE created_at >= $1),
				(SELECT max(id) + 1 FROM sendonce_outbox))`, cutoff)
			if got := bound(cutoff); got != want {
				t.Errorf("%s: bound for a cutoff %s ago: %d, want %d", what, d, got, want)
			}
		}
	}
	check("50,000 rows")
	// What it reads: the table has hundreds of pages; the probes, a few
	// index pages and one heap page each.
	var plan []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sendstate.PruneBoundSQL, ago("1 day")).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	pages := count(t, pool, `SELECT pg_relation_size('sendonce_outbox') / current_setting('block_size')::int`)
	blocks := out[0].Plan.Hit + out[0].Plan.Read
	t.Logf("the bound read %d blocks of a table of %d pages", blocks, pages)
	if blocks > 200 || blocks*4 > pages {
		t.Fatalf("the bound read %d blocks of a table of %d pages; want a few probes (at most 200)", blocks, pages)
	}
	// Ids with gaps, as prunes and deletes leave them: around the first new
	// row, and at the start.
	pgtest.Exec(t, pool, `DELETE FROM sendonce_outbox WHERE id BETWEEN 39000 AND 41000 OR id < 5000`)
	check("with gaps")
}
