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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
)

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, pool *pgxpool.Pool, key string) *outbox.Record {
	t.Helper()
	rec, err := outbox.Get(context.Background(), pool, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func jobState(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

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
		claim(t, pool, k)
	}
	fail(t, pool, "w:uncertain", "503 api_error; gave up after 10 attempts", true)
	fail(t, pool, "w:certain", "422 validation_error: bad address", false)
	fail(t, pool, "w:recent", "503 api_error; gave up after 10 attempts", true)
	exec(t, pool, `UPDATE sendonce_outbox SET first_attempt_at = now() - interval '25 hours' WHERE idempotency_key <> 'w:recent'`)

	// Uncertain and past the window: refused, and nothing changes.
	before := get(t, pool, "w:uncertain")
	_, err := ob.Retry(ctx, "w:uncertain", nil)
	var se *outbox.StateError
	if !errors.Is(err, outbox.ErrMayDeliverTwice) || !errors.As(err, &se) || se.State != outbox.StateFailed {
		t.Fatalf("Retry of an uncertain intent past its window = %v, want ErrMayDeliverTwice", err)
	}
	if after := get(t, pool, "w:uncertain"); after.State != outbox.StateFailed || *after.JobID != *before.JobID {
		t.Fatalf("a refused retry changed the intent: %+v", after)
	}

	// Certain (the API answered every attempt with an error): retried.
	rec, err := ob.Retry(ctx, "w:certain", nil)
	if err != nil || rec.State != outbox.StatePending {
		t.Fatalf("Retry of a certain failure = %+v, %v", rec, err)
	}

	// Uncertain within the window: retried, and the window still runs from
	// the first attempt (a retry at 20 h does not stretch it to 43 h).
	first := get(t, pool, "w:recent").FirstAttemptAt
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

// Hole 2: nothing moved an intent whose River job ended without it.
func TestReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	keys := []string{"s:discarded", "s:deleted", "s:cancelled", "s:live", "s:sent"}
	for _, k := range keys {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: k, Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Fatal(err)
		}
	}
	old := map[string]int64{}
	for _, k := range keys {
		old[k] = *get(t, pool, k).JobID
	}
	// (a) A River client that does not know sendonce's kind rescued the job
	// of a crashed worker and discarded it, leaving the intent sending.
	claim(t, pool, "s:discarded")
	exec(t, pool, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, old["s:discarded"])
	// (b) Deleted, and (c) cancelled, in the River UI.
	exec(t, pool, `DELETE FROM river_job WHERE id = $1`, old["s:deleted"])
	exec(t, pool, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, old["s:cancelled"])
	// A sent intent whose job completed is settled.
	claim(t, pool, "s:sent")
	if _, err := outbox.MarkSent(ctx, pool, outbox.Sent{Key: "s:sent", MessageID: "msg_1"}); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, old["s:sent"])

	n, err := ob.Reconcile(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Reconcile = %d, %v; want 3", n, err)
	}
	for _, k := range []string{"s:discarded", "s:deleted", "s:cancelled"} {
		rec := get(t, pool, k)
		if *rec.JobID == old[k] || jobState(t, pool, *rec.JobID) != "available" {
			t.Errorf("%s: job %d (was %d), want a new available job", k, *rec.JobID, old[k])
		}
	}
	if get(t, pool, "s:discarded").State != outbox.StateSending {
		t.Errorf("a rescued sending intent must stay sending, so its next claim marks it uncertain")
	}
	for _, k := range []string{"s:live", "s:sent"} {
		if rec := get(t, pool, k); *rec.JobID != old[k] {
			t.Errorf("%s: job changed from %d to %d", k, old[k], *rec.JobID)
		}
	}
	if n, err := ob.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("second Reconcile = %d, %v; want 0", n, err)
	}
}

// A worker that dies leaves its intents sending; once its session (and so
// its advisory lock) is gone, RescueAbandoned hands them to new jobs.
func TestRescueAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "r:a", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	// The owner: a session of its own holding the lock, as a worker does.
	owner, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	const id = 4242
	if _, err := owner.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, outbox.OwnerLockClass, int32(id)); err != nil {
		t.Fatal(err)
	}
	opts := claimOpts
	opts.Owner = id
	req := request(t, pool, "r:a")
	if _, ok, err := outbox.Claim(ctx, pool, req, opts); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n, err := ob.RescueAbandoned(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RescueAbandoned with the owner alive = %d, %v; want 0", n, err)
	}
	// Within the grace after a database start, nothing is taken for dead.
	owner.Close(ctx)
	if n, err := ob.RescueAbandoned(ctx, 100*365*24*time.Hour); err != nil || n != 0 {
		t.Fatalf("RescueAbandoned within the restart grace = %d, %v; want 0", n, err)
	}
	var n int
	// The server ends the closed session's backend a moment after the
	// socket closes: poll for it, bounded.
	for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); {
		if n, err = ob.RescueAbandoned(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	rec := get(t, pool, "r:a")
	if n != 1 || *rec.JobID == req.JobID || rec.State != outbox.StateSending {
		t.Fatalf("RescueAbandoned after the owner died = %d; intent %+v", n, rec)
	}
	// The old job can no longer claim; the new one can, and its claim
	// marks the intent uncertain (the dead owner may have sent it).
	if _, ok, _ := outbox.Claim(ctx, pool, req, claimOpts); ok {
		t.Fatal("the superseded job claimed the intent")
	}
	c := claim(t, pool, "r:a")
	if !c.Record.Uncertain || c.Record.Attempts != 2 {
		t.Fatalf("claim after rescue: %+v", c.Record)
	}
}

// Hole 3: a success recorded after another run parked the intent as failed
// was dropped, and a later retry sent it again.
func TestSentWinsOverFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "f:1", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	claim(t, pool, "f:1")
	fail(t, pool, "f:1", "409 conflict_error: request in progress", true)
	overrode, err := outbox.MarkSent(ctx, pool, outbox.Sent{Key: "f:1", MessageID: "msg_9", Replayed: true})
	rec := get(t, pool, "f:1")
	if err != nil || !overrode || rec.State != outbox.StateSent || rec.MessageID != "msg_9" || !rec.Replayed {
		t.Fatalf("MarkSent over failed = %v, %v; intent %+v", overrode, err, rec)
	}
	if _, err := ob.Retry(ctx, "f:1", nil); err == nil {
		t.Fatal("a sent intent was retried")
	}
}

// Hole 4: the window is measured on the database's clock; the claim says
// how much of it is left.
func TestClaimMeasuresTheWindowInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "c:w", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	claim(t, pool, "c:w")
	exec(t, pool, `UPDATE sendonce_outbox SET state = 'pending', first_attempt_at = now() - interval '22 hours 59 minutes'`)
	c := claim(t, pool, "c:w")
	if c.WindowLeft <= 50*time.Second || c.WindowLeft > time.Minute {
		t.Fatalf("window left %s, want just under a minute", c.WindowLeft)
	}
	exec(t, pool, `UPDATE sendonce_outbox SET state = 'pending', first_attempt_at = now() - interval '23 hours 1 second'`)
	if c := claim(t, pool, "c:w"); c.WindowLeft > 0 {
		t.Fatalf("window left %s, want none", c.WindowLeft)
	}
	_ = ctx
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
	if got := countJobs(t, pool, ""); got != 5*n {
		t.Fatalf("%d jobs, want %d", got, 5*n)
	}
}
