package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestCoalesceEndToEnd drains 250 email intents and a template send with
// coalescing on: the emails go out in a few batch requests of at most 100,
// each under a batch key of its own, every email delivered once with its
// own message id; the template send goes alone under its own key.
func TestCoalesceEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	const n = 250
	intents := make([]outbox.Intent, 0, n+1)
	for i := range n {
		intents = append(intents, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: body(fmt.Sprintf("c%d@example.com", i))})
	}
	intents = append(intents, outbox.Intent{Key: "welcome:1", Kind: outbox.KindTemplate, TemplateID: "welcome",
		Payload: `{"from":"hi@example.com","to":["new@example.com"]}`})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, intents)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: 300, Coalesce: 100})
	if err := fake.WaitDeliveries(ctx, n+1); err != nil {
		t.Fatalf("waiting for %d deliveries: %v (have %d)", n+1, err, len(fake.Deliveries()))
	}
	waitSettled(t, ob, n+1)

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
	ids := map[string]bool{}
	for i := range n {
		rec := outboxtest.Get(t, ob, fmt.Sprintf("invoice:%d", i))
		if rec.State != outbox.StateSent || rec.MessageID == "" || !strings.HasPrefix(rec.BatchKey, "sendonce-batch:") || ids[rec.MessageID] {
			t.Fatalf("invoice:%d: %+v, want sent with a message id of its own and a batch key", i, rec)
		}
		ids[rec.MessageID] = true
	}
	if rec := outboxtest.Get(t, ob, "welcome:1"); rec.State != outbox.StateSent || rec.BatchKey != "" {
		t.Errorf("template send: %+v, want sent alone", rec)
	}
	perEmail := map[string]int{}
	for _, d := range fake.Deliveries() {
		perEmail[d.MessageID]++
	}
	if len(fake.Deliveries()) != n+1 || len(perEmail) != n+1 {
		t.Errorf("%d deliveries of %d messages, want %d each", len(fake.Deliveries()), len(perEmail), n+1)
	}
}

// TestCoalesceLoneIntentGoesAlone: with nothing to join, an intent waits
// for the coalesce wait, no longer than that give or take the machinery,
// and is sent alone under its own key.
func TestCoalesceLoneIntentGoesAlone(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	const wait = 300 * time.Millisecond
	start(t, pool, &worker.Config{Client: c, Coalesce: 100, CoalesceWait: wait, FetchCooldown: 5 * time.Millisecond})
	enqueued := time.Now()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "reset:ada", Payload: body("ada@example.com")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d := fake.Deliveries()[0]
	if d.IdempotencyKey != "reset:ada" {
		t.Fatalf("delivered under %q, want its own key", d.IdempotencyKey)
	}
	// The bound is the wait plus a generous allowance for River's fetch and
	// a loaded machine: the point is that it is not held for long.
	if held := d.DeliveredAt.Sub(enqueued); held < wait || held > wait+5*time.Second {
		t.Errorf("lone intent delivered %s after its commit, want at least the wait (%s) and not much more", held, wait)
	}
}

// TestCoalesceNeverMixesQueues runs a coalescing worker per queue on one
// database: every batch holds the intents of one queue only.
func TestCoalesceNeverMixesQueues(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	for _, q := range []string{"billing", "marketing"} {
		ob, err := outbox.New(pool, &outbox.Config{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		var intents []outbox.Intent
		for i := range 60 {
			intents = append(intents, outbox.Intent{Key: fmt.Sprintf("%s:%d", q, i), Payload: body(fmt.Sprintf("%s%d@example.com", q, i))})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueMany(ctx, tx, intents)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		start(t, pool, &worker.Config{Client: c, Queue: q, Coalesce: 100})
	}
	if err := fake.WaitDeliveries(ctx, 120); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT b.idempotency_key, b.queue, m.key FROM sendonce_batch b, unnest(b.member_keys) AS m(key)`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var batch, queue, member string
		if err := rows.Scan(&batch, &queue, &member); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(member, queue+":") {
			t.Errorf("batch %s of queue %s holds %s", batch, queue, member)
		}
		seen++
	}
	if rows.Err() != nil || seen == 0 {
		t.Fatalf("%d batch members read (%v), want some", seen, rows.Err())
	}
}

// TestCoalesceItemRejected: the API refuses one email of a batch and sends
// the others; the refused one is failed with its own reason, certain (it
// may be retried alone), and the others are sent.
func TestCoalesceItemRejected(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, ob := outboxtest.New(t)
	rule, err := fakeapi.ParseFault("reject;to=bounce@")
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: []fakeapi.Fault{rule}})
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	var intents []outbox.Intent
	for i := range 10 {
		to := fmt.Sprintf("c%d@example.com", i)
		if i == 4 {
			to = "bounce@example.com"
		}
		intents = append(intents, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: body(to)})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, intents)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	start(t, pool, &worker.Config{Client: c, Coalesce: 100})
	waitSettled(t, ob, 10)
	for i := range 10 {
		rec := outboxtest.Get(t, ob, fmt.Sprintf("invoice:%d", i))
		switch {
		case i == 4 && (rec.State != outbox.StateFailed || rec.Uncertain || !strings.Contains(rec.LastError, "recipient_rejected")):
			t.Errorf("rejected email: %+v, want failed, certain, with the API's reason", rec)
		case i != 4 && rec.State != outbox.StateSent:
			t.Errorf("invoice:%d: %+v, want sent", i, rec)
		}
	}
	if got := len(fake.Deliveries()); got != 9 {
		t.Errorf("%d deliveries, want 9", got)
	}
}

// body is an invoice email to the address.
func body(to string) string {
	return fmt.Sprintf(`{"from":"billing@example.com","to":[%q],"subject":"Invoice","text":"Attached."}`, to)
}

// waitSettled waits until n intents are settled (sent or failed).
func waitSettled(t *testing.T, ob *outbox.Outbox, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Counts[outbox.StateSent]+st.Counts[outbox.StateFailed] >= int64(n) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d settled intents: %+v", n, st.Counts)
		case <-tick.C:
		}
	}
}
