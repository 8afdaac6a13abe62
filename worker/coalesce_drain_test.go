package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// The drained twins of the coalescing tests: the intents are inserted by
// plain SQL, without a River job of their own, and the drain gathers them
// into batches (sendstate.Batcher.FreezeDue).

// insertManySQL inserts n email intents in one plain-SQL statement, as a
// producer that writes many at once does: keys prefix0 … prefix(n-1), each
// to <addr><i>@example.com, on queue ("" for the default) and of run (none
// when "").
func insertManySQL(t *testing.T, pool *pgxpool.Pool, prefix, addr string, n int, queue, run string) {
	t.Helper()
	if queue == "" {
		queue = outbox.DefaultQueue
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, queue, run_key)
		SELECT $1 || i, 'email', jsonb_build_object('from', 'billing@example.com', 'to', jsonb_build_array($2 || i || '@example.com'),
				'subject', 'Invoice', 'text', 'x'), $4, nullif($5, '')
		FROM generate_series(0, $3::int - 1) AS i`, prefix, addr, n, queue, run); err != nil {
		t.Fatal(err)
	}
}

// TestCoalesceDrainedEndToEnd drains 250 email intents inserted at once and
// a template send, all by SQL, with coalescing on: the emails go out in a
// few batch requests of at most 100, each under a batch key of its own,
// none alone, every email delivered once with its own message id, and
// each observed coalesced; the template send goes alone under its own key. No intent gets a River job
// of its own: only the batches have one.
func TestCoalesceDrainedEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	const n = 250
	insertManySQL(t, pool, "php:invoice:", "c", n, "", "")
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, template_id, payload)
		VALUES ('php:welcome:1', 'template', 'welcome', '{"from":"hi@example.com","to":["new@example.com"]}')`); err != nil {
		t.Fatal(err)
	}
	seen := newResults()
	// Four slots: the drain gathers in the database, so its concurrency
	// does not bound a batch as a job's River slots do.
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, Coalesce: 100, Send: worker.SendConfig{Observer: seen}})
	if err := fake.WaitDeliveries(ctx, n+1); err != nil {
		t.Fatalf("waiting for %d deliveries: %v (have %d)", n+1, err, len(fake.Deliveries()))
	}
	waitSettled(t, ob, n+1)
	seen.wait(t, ctx, worker.ResultCoalesced, n) // each told as a job that joins a batch tells it

	batches := 0
	for _, r := range fake.Requests() {
		if r.Path == "/emails/batch" {
			batches++
			if !strings.HasPrefix(r.IdempotencyKey, "sendonce-batch:") {
				t.Errorf("batch request under key %q, want a sendonce-batch: key", r.IdempotencyKey)
			}
		}
		if r.Path == "/emails" {
			t.Errorf("an email went alone (key %s) though %d came at once", r.IdempotencyKey, n)
		}
	}
	if batches < 3 || batches > 10 {
		t.Errorf("%d batch requests for %d emails, want 3 (of at most 100) to a few", batches, n)
	}
	if big := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_batch WHERE cardinality(member_keys) > 100`); big != 0 {
		t.Errorf("%d batches of more than 100 members", big)
	}
	ids := map[string]bool{}
	for i := range n {
		rec := outboxtest.Get(t, ob, fmt.Sprintf("php:invoice:%d", i))
		if rec.State != outbox.StateSent || rec.MessageID == "" || !strings.HasPrefix(rec.BatchKey, "sendonce-batch:") || ids[rec.MessageID] {
			t.Fatalf("php:invoice:%d: %+v, want sent with a message id of its own and a batch key", i, rec)
		}
		ids[rec.MessageID] = true
	}
	if rec := outboxtest.Get(t, ob, "php:welcome:1"); rec.State != outbox.StateSent || rec.BatchKey != "" {
		t.Errorf("template send: %+v, want sent alone", rec)
	}
	perEmail := map[string]int{}
	for _, d := range fake.Deliveries() {
		perEmail[d.MessageID]++
	}
	if len(fake.Deliveries()) != n+1 || len(perEmail) != n+1 {
		t.Errorf("%d deliveries of %d messages, want %d each", len(fake.Deliveries()), len(perEmail), n+1)
	}
	if jobs := outboxtest.Value[int](t, pool, `SELECT count(*) FROM river_job WHERE kind <> 'sendonce_batch'`); jobs != 0 {
		t.Errorf("%d River jobs other than the batches', want none", jobs)
	}
}

// TestCoalesceDrainedLoneIntentGoesAlone: a drained email intent with
// nothing to join is held for the coalesce wait from its insert, no longer
// than that give or take the machinery, and is sent alone under its own
// key. The sweeper's interval is a minute: the drain wakes itself when the
// wait has passed.
func TestCoalesceDrainedLoneIntentGoesAlone(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	const wait = 300 * time.Millisecond
	start(t, pool, &worker.Config{Client: c, Coalesce: 100, CoalesceWait: wait, SweepInterval: time.Minute})
	inserted := time.Now()
	insertSQL(t, pool, "php:reset:ada", "ada@example.com")
	if err := fake.WaitDeliveries(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d := fake.Deliveries()[0]
	if d.IdempotencyKey != "php:reset:ada" {
		t.Fatalf("delivered under %q, want its own key", d.IdempotencyKey)
	}
	if held := d.DeliveredAt.Sub(inserted); held < wait || held > wait+5*time.Second {
		t.Errorf("lone intent delivered %s after its insert, want at least the wait (%s) and not much more", held, wait)
	}
	for _, r := range fake.Requests() {
		if r.Path != "/emails" {
			t.Errorf("request %s %s, want the one single send", r.Method, r.Path)
		}
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_batch`); n != 0 {
		t.Errorf("%d batches for a lone intent", n)
	}
}

// TestCoalesceDrainedNeverMixesQueuesOrRuns runs a coalescing worker per
// queue on one database, each queue with intents of no run and of a run
// the two queues share: every batch holds the intents of one queue and one
// run (or of no run) only, and none goes alone.
func TestCoalesceDrainedNeverMixesQueuesOrRuns(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('weekly')`); err != nil {
		t.Fatal(err)
	}
	const each = 40
	for _, q := range []string{"billing", "marketing"} {
		insertManySQL(t, pool, q+":", q, each, q, "")
		insertManySQL(t, pool, q+":weekly:", q+"w", each, q, "weekly")
	}
	for _, q := range []string{"billing", "marketing"} {
		start(t, pool, &worker.Config{Client: c, Queue: q, Coalesce: 100})
	}
	if err := fake.WaitDeliveries(ctx, 4*each); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT b.idempotency_key, b.queue, coalesce(b.run_key, ''), o.idempotency_key, o.queue, coalesce(o.run_key, '')
		FROM sendonce_batch b CROSS JOIN unnest(b.member_keys) AS m(key) JOIN sendonce_outbox o ON o.idempotency_key = m.key`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var batch, queue, run, member, memberQueue, memberRun string
		if err := rows.Scan(&batch, &queue, &run, &member, &memberQueue, &memberRun); err != nil {
			t.Fatal(err)
		}
		if memberQueue != queue || memberRun != run || !strings.HasPrefix(member, queue+":") {
			t.Errorf("batch %s of queue %s, run %q holds %s of queue %s, run %q", batch, queue, run, member, memberQueue, memberRun)
		}
		seen++
	}
	if rows.Err() != nil || seen != 4*each {
		t.Fatalf("%d batch members read (%v), want all %d", seen, rows.Err(), 4*each)
	}
	for _, r := range fake.Requests() {
		if r.Path != "/emails/batch" {
			t.Errorf("request %s %s (key %s), want batches only", r.Method, r.Path, r.IdempotencyKey)
		}
	}
}

// TestCoalesceDrainedItemRejected: the API refuses one email of a batch the
// drain froze and sends the others; the refused one is failed with its own
// reason, certain (it may be retried alone), and the others are sent.
func TestCoalesceDrainedItemRejected(t *testing.T) {
	t.Parallel()
	_, pool, ob, _, _ := e2eSetup(t)
	fake, c := faultyAPI(t, "reject;to=bounce@")
	for i := range 10 {
		to := fmt.Sprintf("c%d@example.com", i)
		if i == 4 {
			to = "bounce@example.com"
		}
		insertSQL(t, pool, fmt.Sprintf("php:invoice:%d", i), to)
	}
	start(t, pool, &worker.Config{Client: c, Coalesce: 100})
	waitSettled(t, ob, 10)
	for i := range 10 {
		rec := outboxtest.Get(t, ob, fmt.Sprintf("php:invoice:%d", i))
		switch {
		case !strings.HasPrefix(rec.BatchKey, "sendonce-batch:"):
			t.Errorf("php:invoice:%d: %+v, want it sent in a batch", i, rec)
		case i == 4 && (rec.State != outbox.StateFailed || rec.Uncertain || !strings.Contains(rec.LastError, "recipient_rejected")):
			t.Errorf("rejected email: %+v, want failed, certain, with the API's reason", rec)
		case i != 4 && rec.State != outbox.StateSent:
			t.Errorf("php:invoice:%d: %+v, want sent", i, rec)
		}
	}
	if got := len(fake.Deliveries()); got != 9 {
		t.Errorf("%d deliveries, want 9", got)
	}
}

// TestCoalesceDrainedBatchOutlivesItsWorker: a batch the drain froze is a
// River job of its own, so a worker stopped after the freeze and before
// the batch's send leaves it to the fleet: another worker (coalescing or
// not) sends it, once, whole, under the batch's key. The first worker's
// River client is stopped before the intents come, so that it cannot
// fetch the batch's job; its drain, which freezes, runs on.
func TestCoalesceDrainedBatchOutlivesItsWorker(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	first, err := worker.New(pool, &worker.Config{Client: c, Coalesce: 10})
	if err != nil {
		t.Fatal(err)
	}
	froze := make(chan int, 16)
	worker.SetAfterFreezeDue(first, func(batches, members int) {
		if batches > 0 {
			froze <- members
		}
	})
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Stop(context.Background()) })
	if err := first.RiverClient().Stop(ctx); err != nil {
		t.Fatal(err)
	}
	insertManySQL(t, pool, "php:invoice:", "c", 5, "", "")
	select {
	case members := <-froze:
		if members != 5 {
			t.Fatalf("froze a batch of %d, want the 5 intents", members)
		}
	case <-ctx.Done():
		t.Fatal("the drain froze no batch")
	}
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	key := outboxtest.Value[string](t, pool, `SELECT idempotency_key FROM sendonce_batch WHERE state = 'pending'`)
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("%d requests before the second worker, want none: the batch must be left unsent", n)
	}

	start(t, pool, &worker.Config{Client: c})
	if err := fake.WaitDeliveries(ctx, 5); err != nil {
		t.Fatalf("the frozen batch was not sent: %v (%d deliveries)", err, len(fake.Deliveries()))
	}
	waitSettled(t, ob, 5)
	for i := range 5 {
		if rec := outboxtest.Get(t, ob, fmt.Sprintf("php:invoice:%d", i)); rec.State != outbox.StateSent || rec.BatchKey != key || rec.Attempts != 1 {
			t.Errorf("php:invoice:%d: %+v, want sent in batch %s at its first attempt", i, rec, key)
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/emails/batch" || reqs[0].IdempotencyKey != key {
		t.Errorf("requests %+v, want the one batch request under %s", reqs, key)
	}
	if got := len(fake.Deliveries()); got != 5 {
		t.Errorf("%d deliveries, want 5", got)
	}
}
