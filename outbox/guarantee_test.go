package outbox_test

// Tests for the holes an audit found in the guarantee (issue 10): each
// scenario here broke the promise before the fix it names.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Hole 1: Retry reset the first attempt's time and accepted any failed
// intent, so an intent whose first attempt reached the API was delivered
// again when retried after the API forgot its key.
func TestRetryPastTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for _, k := range []string{"w:uncertain", "w:certain", "w:recent"} {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: k, Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Fatal(err)
		}
		attempted(t, pool, ob, k, outbox.StateFailed, k != "w:certain")
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET first_attempt_at = now() - interval '25 hours' WHERE idempotency_key <> 'w:recent'`)

	// Uncertain and past the window: refused, and nothing changes.
	before := outboxtest.Get(t, ob, "w:uncertain")
	_, err := ob.Retry(ctx, "w:uncertain", nil)
	var se *outbox.StateError
	if !errors.Is(err, outbox.ErrMayDeliverTwice) || !errors.As(err, &se) || se.State != outbox.StateFailed {
		t.Fatalf("Retry of an uncertain intent past its window = %v, want ErrMayDeliverTwice", err)
	}
	if after := outboxtest.Get(t, ob, "w:uncertain"); after.State != outbox.StateFailed ||
		fmt.Sprint(recordFields(*after)) != fmt.Sprint(recordFields(*before)) {
		t.Fatalf("a refused retry changed the intent:\n%v\nwas\n%v", recordFields(*after), recordFields(*before))
	}

	// Certain (the API answered every attempt with an error): retried.
	rec, err := ob.Retry(ctx, "w:certain", nil)
	if err != nil || rec.State != outbox.StatePending {
		t.Fatalf("Retry of a certain failure = %+v, %v", rec, err)
	}

	// Uncertain within the window: retried, and the window still runs from
	// the first attempt (a retry at 20 h does not stretch it to 43 h).
	first := outboxtest.Get(t, ob, "w:recent").FirstAttemptAt
	rec, err = ob.Retry(ctx, "w:recent", nil)
	if err != nil || rec.FirstAttemptAt == nil || !rec.FirstAttemptAt.Equal(*first) || !rec.Uncertain {
		t.Fatalf("Retry within the window = %+v, %v; want the first attempt's time kept", rec, err)
	}

	// Forced: the operator takes the risk; recorded on the row.
	rec, err = ob.Retry(ctx, "w:uncertain", &outbox.RetryOptions{Force: true})
	if err != nil || rec.State != outbox.StatePending || rec.ForcedRetryAt == nil || rec.FirstAttemptAt != nil || rec.Uncertain {
		t.Fatalf("forced Retry = %+v, %v", rec, err)
	}
}

// Hole 7: text PostgreSQL cannot store aborted the caller's transaction.
func TestEnqueueUnstorableText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for name, payload := range map[string]string{
		"NUL escape":     `{"from":"a@example.com","to":["b@example.com"],"text":"x\u0000y"}`,
		"lone high":      `{"from":"a@example.com","to":["b@example.com"],"text":"x\ud800y"}`,
		"lone low":       `{"from":"a@example.com","to":["b@example.com"],"text":"\udc00"}`,
		"high then text": `{"from":"a@example.com","to":["b@example.com"],"text":"\ud800\u0041"}`,
		"invalid UTF-8":  "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"\xff\"}",
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ob.Enqueue(ctx, tx, outbox.Intent{Key: "u:1", Payload: json.RawMessage(payload)})
		var inv *outbox.InvalidError
		if !errors.As(err, &inv) || inv.Field != "payload" {
			t.Errorf("%s: error %v, want an InvalidError for payload", name, err)
		}
		// The caller's transaction is still usable.
		if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "u:ok", Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Errorf("%s: transaction unusable after the refusal: %v", name, err)
		}
		tx.Rollback(ctx)
	}
	// A valid surrogate pair is fine.
	pair := `{"from":"a@example.com","to":["b@example.com"],"text":"\ud83d\ude00"}`
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "u:pair", Payload: json.RawMessage(pair)}); err != nil {
		t.Fatalf("surrogate pair: %v", err)
	}
}

// Hole 7: payloads equal as jsonb are the same intent within one call too.
func TestEnqueueManyComparesPayloadsAsJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	spaced := `{ "to": ["ada@example.com"], "from": "billing@example.com", "subject": "Invoice inv_4192", "text": "Attached." }`
	var res []*outbox.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = ob.EnqueueMany(ctx, tx, []outbox.Intent{
			{Key: "j:1", Payload: json.RawMessage(invoiceBody)},
			{Key: "j:1", Payload: json.RawMessage(spaced)},
		})
		return err
	})
	if err != nil || len(res) != 2 || res[0].Existing || !res[1].Existing || res[1].Record.ID != res[0].Record.ID {
		t.Fatalf("EnqueueMany of one intent written two ways = %+v, %v", res, err)
	}
	// A different payload under the same key is still refused.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{
			{Key: "j:2", Payload: json.RawMessage(invoiceBody)},
			{Key: "j:2", Payload: json.RawMessage(spaced[:len(spaced)-1] + `, "html": "<p>x</p>"}`)},
		})
		return err
	})
	var reuse *outbox.KeyReuseError
	if !errors.As(err, &reuse) || reuse.Index != 1 {
		t.Fatalf("EnqueueMany with two payloads under one key = %v, want a KeyReuseError at 1", err)
	}
}

// Hole 7: transactions enqueueing overlapping keys in opposite orders
// deadlocked (40P01).
func TestEnqueueManyOppositeOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	const n = 200
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for w := range 2 {
			intents := make([]outbox.Intent, n)
			for i := range intents {
				k := i
				if w == 1 {
					k = n - 1 - i
				}
				intents[i] = outbox.Intent{Key: fmt.Sprintf("d:%d:%03d", round, k), Payload: json.RawMessage(invoiceBody)}
			}
			wg.Go(func() {
				errs[w] = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := ob.EnqueueMany(ctx, tx, intents)
					return err
				})
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 5*n || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs, want %d and none", rows, jobs, 5*n)
	}
}
