package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// Config.OnStatus keeps an application's table in step with the sends:
// each invoice's emailed_at is set once, in the transaction that records
// its email sent. A hook that fails rolls the record back; the email goes
// out again under its key, the API replays it, and the record and the
// hook are made again: still one delivery, and one update.
func TestOnStatusSetsEmailedAtWithTheRecord(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, emailed_at timestamptz, emailed int NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		id := fmt.Sprintf("inv_%d", i)
		body := fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x","tags":{"invoice":%q}}`, i, id)
		if _, err := pool.Exec(ctx, `WITH i AS (INSERT INTO invoices (id) VALUES ($1))
			INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:' || $1, 'email', $2)`, id, body); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	failed := map[string]int{}
	hook := func(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
		ids := make([]string, 0, len(statuses))
		for _, s := range statuses {
			if s.Transition != outbox.TransitionSent {
				return fmt.Errorf("told of %s of %s", s.Transition, s.Key)
			}
			ids = append(ids, s.Tags["invoice"])
		}
		if _, err := tx.Exec(ctx, `UPDATE invoices SET emailed_at = now(), emailed = emailed + 1 WHERE id = ANY($1)`, ids); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if id == "inv_7" && failed[id] < 3 {
				failed[id]++
				return errors.New("the books are closed")
			}
		}
		return nil
	}
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 8, OnStatus: hook, Send: worker.SendConfig{Observer: seen}})
	// Every intent ends recorded, sent or replayed (inv_7, and any answer
	// recorded in the statements its hook failed, were sent again).
	for {
		seen.mu.Lock()
		done, ch := seen.n[worker.ResultSent]+seen.n[worker.ResultReplayed], seen.changed
		seen.mu.Unlock()
		if done >= n && outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == n {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %d intents recorded: %d", n, done)
		}
	}
	if err := fake.WaitDeliveries(ctx, n); err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, d := range fake.Deliveries() {
		perKey[d.IdempotencyKey]++
	}
	if len(perKey) != n {
		t.Fatalf("%d keys delivered, want %d", len(perKey), n)
	}
	for k, c := range perKey {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
	if bad := outboxtest.Value[int](t, pool, `SELECT count(*) FROM invoices WHERE emailed <> 1 OR emailed_at IS NULL`); bad != 0 {
		t.Fatalf("%d invoices not updated exactly once", bad)
	}
	if failed["inv_7"] != 3 {
		t.Fatalf("the hook failed %d times for inv_7, want 3", failed["inv_7"])
	}
	if a := outboxtest.Value[int](t, pool, `SELECT attempts FROM sendonce_outbox WHERE idempotency_key = 'invoice:inv_7'`); a < 2 {
		t.Fatalf("invoice:inv_7 attempted %d times: its record was not rolled back and made again", a)
	}
}
