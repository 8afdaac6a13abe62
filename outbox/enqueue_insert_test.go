package outbox_test

// Tests for the statement that writes the intents' rows (enqueue_insert.go):
// the rows must be the intents given, with no River job, on the Outbox's
// queue, marked as checked, and the workers' drains must be woken for the
// ones due now.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

func enqueueMany(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, intents []outbox.Intent) []*outbox.EnqueueResult {
	t.Helper()
	var res []*outbox.EnqueueResult
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		res, err = ob.EnqueueMany(context.Background(), tx, intents)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The rows EnqueueMany writes are the intents given, column for column,
// on the Outbox's queue, marked checked, pending with nothing of a send
// yet; no River job is written; the drain of that queue (and only it)
// claims the intent due now, and not the one held.
func TestEnqueuedRowsAreTheIntents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := setup(t)
	ob, err := outbox.New(pool, &outbox.Config{Queue: "mail-eu"})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	template := `{"from":"a@example.com","to":"b@example.com"}`
	given := []outbox.Intent{
		{Key: "now", Payload: json.RawMessage(invoiceBody)},
		{Key: "later", Kind: outbox.KindTemplate, TemplateID: "welcome", Payload: json.RawMessage(template), SendAt: later, Topic: "news"},
	}
	res := enqueueMany(t, pool, ob, given)
	for n, in := range given {
		var kind, templateID, queue, state, topic string
		var sendAt *time.Time
		var samePayload, noJob, checked, fresh bool
		err := pool.QueryRow(ctx, `SELECT id = $2, kind, payload = $3::jsonb, coalesce(template_id, ''), send_at, coalesce(topic, ''),
				queue, checked, job_id IS NULL, state,
				run_key IS NULL AND batch_key IS NULL AND attempts = 0 AND tries = 0 AND rate_limited = 0 AND snoozes = 0
					AND next_attempt_at IS NULL AND first_attempt_at IS NULL AND message_id IS NULL AND NOT uncertain
			FROM sendonce_outbox WHERE idempotency_key = $1`, in.Key, res[n].Record.ID, string(in.Payload.(json.RawMessage))).
			Scan(new(bool), &kind, &samePayload, &templateID, &sendAt, &topic, &queue, &checked, &noJob, &state, &fresh)
		if err != nil {
			t.Fatal(err)
		}
		wantKind := in.Kind
		if wantKind == "" {
			wantKind = outbox.KindEmail
		}
		sameSend := (sendAt == nil) == in.SendAt.IsZero() && (sendAt == nil || sendAt.Equal(in.SendAt))
		if kind != string(wantKind) || !samePayload || templateID != in.TemplateID || !sameSend || topic != in.Topic ||
			queue != "mail-eu" || !checked || !noJob || state != string(outbox.StatePending) || !fresh {
			t.Errorf("intent %q stored as kind %s (payload the same: %v), template %q, send at %v, topic %q, queue %s, checked %v, no job %v, %s, fresh %v",
				in.Key, kind, samePayload, templateID, sendAt, topic, queue, checked, noJob, state, fresh)
		}
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs written, want none", n)
	}
	if got := drainKeys(t, pool, outbox.DefaultQueue); len(got) != 0 {
		t.Fatalf("the drain of %s would claim %v, want nothing of queue mail-eu", outbox.DefaultQueue, got)
	}
	if got := drainKeys(t, pool, "mail-eu"); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("the drain of mail-eu would claim %v, want the intent due now only", got)
	}
}

// Whatever happens to a call, the rows are the intents given, one each,
// none with a River job, and no call writes a job.
func TestEnqueueManyRowsMatchTheIntents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	var intents []outbox.Intent
	for i := range 300 {
		in := outbox.Intent{Key: fmt.Sprintf("m:%03d", i), Payload: json.RawMessage(invoiceBody)}
		if i%3 == 0 {
			in.SendAt = time.Now().Add(time.Duration(i) * time.Minute).Truncate(time.Microsecond)
		}
		intents = append(intents, in)
	}
	enqueueMany(t, pool, ob, intents[:100])
	// Keys already stored, a key given twice, new keys; then keys that are
	// all stored already.
	res := enqueueMany(t, pool, ob, append(intents[50:], intents[200]))
	if !res[0].Existing || res[100].Existing || !res[250].Existing || res[250].Record.ID != res[150].Record.ID {
		t.Fatalf("results: [0] %v, [100] %v, [250] %v", res[0].Existing, res[100].Existing, res[250].Existing)
	}
	enqueueMany(t, pool, ob, intents)
	// A refused call takes back its rows.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{
			{Key: "m:new", Payload: json.RawMessage(invoiceBody)},
			{Key: "m:007", Payload: json.RawMessage(strings.Replace(invoiceBody, "ada@", "eve@", 1))},
		})
		if !errors.Is(err, outbox.ErrKeyReuse) {
			t.Errorf("reuse: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if n := countRows(t, pool); n != 300 {
		t.Fatalf("%d rows, want 300", n)
	}
	keys := make([]string, len(intents))
	sendAts := make([]*time.Time, len(intents))
	for i, in := range intents {
		keys[i] = in.Key
		if !in.SendAt.IsZero() {
			sendAts[i] = &intents[i].SendAt
		}
	}
	if n := outboxtest.Value[int](t, pool, `
		SELECT count(*) FROM sendonce_outbox o FULL JOIN unnest($1::text[], $2::timestamptz[]) AS i(key, send_at) ON i.key = o.idempotency_key
		WHERE o.id IS NULL OR i.key IS NULL OR o.send_at IS DISTINCT FROM i.send_at OR o.payload <> $3::jsonb
			OR o.job_id IS NOT NULL OR NOT o.checked OR o.queue <> $4 OR o.state <> 'pending'`,
		keys, sendAts, invoiceBody, outbox.DefaultQueue); n != 0 {
		t.Fatalf("%d rows or intents without their match", n)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs, want none", n)
	}
}

// A call that inserts intents wakes the workers' drains at commit, once: it
// notifies channel sendonce_outbox, on which their sweepers listen. A call
// whose new intents are all held until later does too (the drains read the
// time of the first, and wake then); one rolled back does not, nor one
// whose intents are all stored already.
func TestEnqueueWakesTheDrains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	l := listen(t, pool)

	var due []outbox.Intent
	for i := range 50 {
		due = append(due, outbox.Intent{Key: fmt.Sprintf("due:%d", i), Payload: json.RawMessage(invoiceBody)})
	}
	held := outbox.Intent{Key: "held:1", Payload: json.RawMessage(invoiceBody), SendAt: time.Now().Add(24 * time.Hour)}
	enqueueMany(t, pool, ob, append(slices.Clone(due), held))
	l.await(t)
	l.none(t, "one call") // once per call, however many intents it has

	enqueueMany(t, pool, ob, []outbox.Intent{{Key: "held:2", Payload: json.RawMessage(invoiceBody), SendAt: time.Now().Add(time.Hour)}})
	l.await(t) // a call of intents held until later
	l.none(t, "a call of intents held until later")
	enqueueMany(t, pool, ob, due[:10])
	l.none(t, "a call of intents stored already")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "rolled-back", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	l.none(t, "a rolled-back call")

	// What the woken drain finds: the intents due now, not those held.
	var want []string
	for _, in := range due {
		want = append(want, in.Key)
	}
	got := drainKeys(t, pool, "")
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the drain would claim %v, want the 50 intents due now", got)
	}

	// Enqueue (one intent) wakes them too.
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "due:one", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	l.await(t)
}

// A plain-SQL producer's row is still checked by the producer triggers
// (checked false, as it leaves it), while a row EnqueueMany writes, checked
// in Go and by its own statement, is marked checked and skips every one of
// them (migration 00025). The triggers' calls are counted in the
// transaction (pg_stat_xact_user_functions), which is REPEATABLE READ and
// inserts run members, so that each of them would run.
func TestEnqueueSkipsTheProducerTriggers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	triggers := []string{"sendonce_outbox_check", "sendonce_outbox_notify", "sendonce_outbox_run_member",
		"sendonce_outbox_snapshot", "sendonce_outbox_tombstone"}
	calls := func(tx pgx.Tx) map[string]int {
		t.Helper()
		rows, err := tx.Query(ctx, `SELECT funcname::text, calls::int FROM pg_stat_xact_user_functions WHERE funcname = ANY($1)`, triggers)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for rows.Next() {
			var name string
			var n int
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			out[name] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
			return err
		}
		if _, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "trig:run", Intents: []outbox.Intent{{Key: "trig:go", Payload: invoiceBody}}}); err != nil {
			return err
		}
		if got := calls(tx); len(got) != 0 {
			t.Errorf("EnqueueRun ran producer triggers: %v, want none", got)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload, run_key) VALUES ('trig:sql', $1, 'trig:run')`, invoiceBody); err != nil {
			return err
		}
		want := map[string]int{"sendonce_outbox_check": 1, "sendonce_outbox_notify": 1, "sendonce_outbox_run_member": 1,
			"sendonce_outbox_snapshot": 1, "sendonce_outbox_tombstone": 2}
		if got := calls(tx); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("a plain-SQL insert ran producer triggers %v, want %v", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE (idempotency_key = 'trig:go' AND checked) OR (idempotency_key = 'trig:sql' AND NOT checked)`); n != 2 {
		t.Fatalf("%d of the 2 rows marked as their producers leave them (Go's checked, plain SQL's not), want 2", n)
	}
	// The plain-SQL producer's checks still refuse what they refused.
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('trig:bad', '{"from":"a@x.io","text":"x"}')`); err == nil ||
		!strings.Contains(err.Error(), `recipient in "to"`) {
		t.Fatalf("a plain-SQL row without a recipient: %v, want the check trigger's refusal", err)
	}
}

// A call of 1,000 names its first invalid intent and writes nothing when it
// refuses, generates distinct keys, and puts every intent on the drain.
func TestEnqueueManyLargeCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	bad := json.RawMessage(`{"from":"a@example.com","text":"x"}`)
	for _, tc := range []struct {
		bad  []int
		want string
	}{
		{[]int{700, 300, 999}, "intent 300: invalid payload.to"},
		{[]int{999}, "intent 999: invalid payload.to"},
		{[]int{0, 500}, "intent 0: invalid payload.to"},
	} {
		intents := make([]outbox.Intent, 1000)
		for i := range intents {
			intents[i] = outbox.Intent{Key: fmt.Sprintf("bad:%d", i), Payload: json.RawMessage(invoiceBody)}
		}
		for _, i := range tc.bad {
			intents[i].Payload = bad
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueMany(ctx, tx, intents)
			var inv *outbox.InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("bad intents at %v: %v, want %q", tc.bad, err, tc.want)
			}
			_, err = tx.Exec(ctx, `SELECT 1`)
			return err
		})
		if err != nil {
			t.Fatalf("transaction after a refused call: %v", err)
		}
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 0 || jobs != 0 {
		t.Fatalf("refused calls left %d rows and %d River jobs", rows, jobs)
	}

	intents := make([]outbox.Intent, 1000)
	for i := range intents {
		intents[i] = outbox.Intent{Key: outbox.RandomKey(), Payload: map[string]any{"from": "a@example.com", "to": fmt.Sprintf("c%d@example.com", i), "text": "x"}}
	}
	keys := map[string]bool{}
	for i, r := range enqueueMany(t, pool, ob, intents) {
		if r.Existing || keys[r.Record.Key] || !strings.Contains(string(r.Record.Payload), fmt.Sprintf("c%d@", i)) {
			t.Fatalf("result %d: %+v", i, r.Record)
		}
		keys[r.Record.Key] = true
	}
	if n := len(drainClaims(t, pool, "")); n != 1000 {
		t.Fatalf("the drain would claim %d intents, want 1000", n)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs, want none", n)
	}
}

// A queue River would refuse is refused before anything is written.
func TestEnqueueInvalidQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := setup(t)
	ob, err := outbox.New(pool, &outbox.Config{Queue: "Send Once"})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "q:1", Payload: json.RawMessage(invoiceBody)})
		if err == nil || !strings.Contains(err.Error(), "queue name") {
			t.Errorf("enqueue on queue %q: %v", "Send Once", err)
		}
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err != nil {
		t.Fatalf("transaction after a refused enqueue: %v", err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

// TestEnqueueResultIsTheStoredIntent: the Record EnqueueMany returns for a
// new intent, built from the intent and what the database chose, is the
// row Get reads back: the same fields, the payload the same JSON value (and
// the caller's bytes, changed afterwards, do not change it), and a run
// member's topic taken from its run.
func TestEnqueueResultIsTheStoredIntent(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	payload := []byte(`{ "to": ["ada@example.test"], "from": "Shop <shop@example.test>", "subject": "Invoice", "text": "Hi." }`)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	var got []*outbox.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "digest:2026-12", Topic: "digest", Intents: []outbox.Intent{
			{Key: "result:run", Payload: payload},
			{Key: "result:own-topic", Payload: payload, Topic: "news", SendAt: at}}})
		if err != nil {
			return err
		}
		got = res.Intents
		more, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{{Key: "welcome:ada", Kind: outbox.KindTemplate, TemplateID: "welcome",
			Payload: `{"from":"shop@example.test","to":"ada@example.test"}`}})
		got = append(got, more...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	copy(payload, "XXXXXXXX")
	for _, r := range got {
		stored, err := ob.Get(ctx, r.Record.Key)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(r.Record.Payload, &a); err != nil {
			t.Fatalf("%s: result payload %q: %v", r.Record.Key, r.Record.Payload, err)
		}
		if err := json.Unmarshal(stored.Payload, &b); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: result payload %s, stored %s", r.Record.Key, r.Record.Payload, stored.Payload)
		}
		res, want := *r.Record, *stored
		res.Payload, want.Payload = nil, nil
		if fmt.Sprintf("%+v", recordFields(res)) != fmt.Sprintf("%+v", recordFields(want)) {
			t.Errorf("%s: result\n%+v\nstored\n%+v", r.Record.Key, recordFields(res), recordFields(want))
		}
		if r.Existing {
			t.Errorf("%s: Existing on a new intent", r.Record.Key)
		}
	}
	if got[0].Record.Topic != "digest" || got[1].Record.Topic != "news" || got[1].Record.SendAt == nil || !got[1].Record.SendAt.Equal(at) {
		t.Errorf("topics %q %q, send at %v: want the run's, the member's own, %v", got[0].Record.Topic, got[1].Record.Topic, got[1].Record.SendAt, at)
	}
}

// recordFields is r with its pointers read, for comparing and printing.
func recordFields(r outbox.Record) map[string]any {
	deref := func(p *time.Time) any {
		if p == nil {
			return nil
		}
		return p.UnixMicro()
	}
	job := any(nil)
	if r.JobID != nil {
		job = *r.JobID
	}
	return map[string]any{"id": r.ID, "key": r.Key, "kind": r.Kind, "template": r.TemplateID, "sendAt": deref(r.SendAt),
		"state": r.State, "attempts": r.Attempts, "job": job, "created": r.CreatedAt.UnixMicro(), "updated": r.UpdatedAt.UnixMicro(),
		"traceparent": r.TraceParent, "tracestate": r.TraceState, "topic": r.Topic, "messageId": r.MessageID,
		"firstAttempt": deref(r.FirstAttemptAt), "suppressed": r.SuppressedRecipients, "listUnsubscribe": string(r.ListUnsubscribe),
		"tenant": r.Tenant}
}
