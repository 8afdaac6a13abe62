package outbox_test

// Tests for the statement that writes rows and River jobs together
// (enqueue_insert.go): its jobs must be the jobs River would have written,
// and River must work them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/base/sendjob"
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

// The jobs EnqueueMany writes are, column for column, those River's
// InsertManyTx writes for the same arguments and options, but for the id
// and the times River takes from the client's clock.
func TestEnqueuedJobsAreRiversJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	template := `{"from":"a@example.com","to":"b@example.com"}`
	var riverIDs []int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := rc.InsertManyTx(ctx, tx, []river.InsertManyParams{
			{Args: sendjob.Args{Key: "now", IntentKind: "email"}, InsertOpts: sendjob.InsertOpts(outbox.DefaultQueue, time.Time{}, sendjob.PriorityNormal)},
			{Args: sendjob.Args{Key: "later", IntentKind: "template"}, InsertOpts: sendjob.InsertOpts(outbox.DefaultQueue, later, sendjob.PriorityNormal)},
		})
		for _, r := range res {
			riverIDs = append(riverIDs, r.Job.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res := enqueueMany(t, pool, ob, []outbox.Intent{
		{Key: "now", Payload: json.RawMessage(invoiceBody)},
		{Key: "later", Kind: outbox.KindTemplate, TemplateID: "welcome", Payload: json.RawMessage(template), SendAt: later},
	})
	for n, r := range res {
		var same, sameSchedule bool
		var ours, theirs string
		err := pool.QueryRow(ctx, `
			SELECT to_jsonb(o) - '{id,created_at,scheduled_at}'::text[] = to_jsonb(r) - '{id,created_at,scheduled_at}'::text[],
				CASE WHEN o.state = 'scheduled' THEN o.scheduled_at = r.scheduled_at
					ELSE o.scheduled_at = o.created_at AND abs(extract(epoch FROM o.created_at - now())) < 60 END,
				to_jsonb(o)::text, to_jsonb(r)::text
			FROM river_job o, river_job r WHERE o.id = $1 AND r.id = $2`, *r.Record.JobID, riverIDs[n]).Scan(&same, &sameSchedule, &ours, &theirs)
		if err != nil {
			t.Fatal(err)
		}
		if !same || !sameSchedule {
			t.Errorf("intent %q: job\n  %s\nRiver's\n  %s", r.Record.Key, ours, theirs)
		}
	}
}

// Whatever happens to a call, every row has its job and every job its row.
func TestEnqueueManyRowsAndJobsMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	var intents []outbox.Intent
	for i := range 300 {
		in := outbox.Intent{Key: fmt.Sprintf("m:%03d", i), Payload: json.RawMessage(invoiceBody)}
		if i%3 == 0 {
			in.SendAt = time.Now().Add(time.Duration(i) * time.Minute)
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
	// A refused call takes back its rows and jobs.
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

	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox`); n != 300 {
		t.Fatalf("%d rows, want 300", n)
	}
	if n := outboxtest.Value[int](t, pool, `
		SELECT count(*) FROM sendonce_outbox o FULL JOIN river_job j ON j.id = o.job_id
		WHERE o.id IS NULL OR j.id IS NULL OR j.args->>'key' <> o.idempotency_key OR j.args->>'kind' <> o.kind
			OR j.state <> CASE WHEN o.send_at IS NULL THEN 'available' ELSE 'scheduled' END::river_job_state
			OR j.scheduled_at <> coalesce(o.send_at, o.created_at)`); n != 0 {
		t.Fatalf("%d rows or jobs without their match", n)
	}
}

// sendJobs records the send jobs a River client works.
type sendJobs struct {
	river.WorkerDefaults[sendjob.Args]
	worked chan *river.Job[sendjob.Args]
}

func (w *sendJobs) Work(ctx context.Context, job *river.Job[sendjob.Args]) error {
	w.worked <- job
	return nil
}

// A River client works the jobs, and the notification sent with them wakes
// it at commit: it polls only every 30 s.
func TestEnqueuedJobsAreWorkedByRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	w := &sendJobs{worked: make(chan *river.Job[sendjob.Args], 1000)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{outbox.DefaultQueue: {MaxWorkers: 100}},
		Workers:           workers,
		FetchPollInterval: 30 * time.Second,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rc.StopAndCancel(ctx)
	})

	round := func(name string, within time.Duration) {
		var intents []outbox.Intent
		for i := range 50 {
			intents = append(intents, outbox.Intent{Key: fmt.Sprintf("%s:%d", name, i), Payload: json.RawMessage(invoiceBody)})
		}
		// Held for a day: River must leave it alone.
		intents = append(intents, outbox.Intent{Key: name + ":held", Payload: json.RawMessage(invoiceBody), SendAt: time.Now().Add(24 * time.Hour)})
		jobOf := map[string]int64{}
		for _, r := range enqueueMany(t, pool, ob, intents) {
			jobOf[r.Record.Key] = *r.Record.JobID
		}
		committed := time.Now()
		timeout := time.After(within)
		for range 50 {
			select {
			case job := <-w.worked:
				if id, ok := jobOf[job.Args.Key]; !ok || id != job.ID || job.Args.IntentKind != "email" || job.Queue != outbox.DefaultQueue {
					t.Fatalf("worked job %d %+v on %s; the rows' jobs are %v", job.ID, job.Args, job.Queue, jobOf)
				}
				delete(jobOf, job.Args.Key)
			case <-timeout:
				t.Fatalf("%s: jobs of %v not worked within %v", name, jobOf, within)
			}
		}
		t.Logf("%s: 50 jobs worked %v after commit", name, time.Since(committed).Round(time.Millisecond))
		if state := outboxtest.Value[string](t, pool, `SELECT state::text FROM river_job WHERE id = $1`, jobOf[name+":held"]); state != "scheduled" {
			t.Fatalf("held job is %s", state)
		}
	}
	// The first round may be found by the client's first fetch. By the
	// second, the client only polls, or waits on the LISTEN it ran before
	// its first fetch.
	round("first", 20*time.Second)
	time.Sleep(200 * time.Millisecond)
	round("second", 10*time.Second)
}

// A call of 1,000 names its first invalid intent and writes nothing when it
// refuses, generates distinct keys, and gives every intent its job.
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
			intents[i] = outbox.Intent{Payload: json.RawMessage(invoiceBody)}
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
	if n := countJobs(t, pool, ""); n != 0 {
		t.Fatalf("refused calls left %d jobs", n)
	}

	intents := make([]outbox.Intent, 1000)
	for i := range intents {
		intents[i] = outbox.Intent{Payload: map[string]any{"from": "a@example.com", "to": fmt.Sprintf("c%d@example.com", i), "text": "x"}}
	}
	keys := map[string]bool{}
	for i, r := range enqueueMany(t, pool, ob, intents) {
		if r.Existing || keys[r.Record.Key] || !strings.Contains(string(r.Record.Payload), fmt.Sprintf("c%d@", i)) {
			t.Fatalf("result %d: %+v", i, r.Record)
		}
		keys[r.Record.Key] = true
	}
	if n := countJobs(t, pool, "available"); n != 1000 {
		t.Fatalf("%d jobs, want 1000", n)
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
		more, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{{Kind: outbox.KindTemplate, TemplateID: "welcome",
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
		"firstAttempt": deref(r.FirstAttemptAt), "suppressed": r.SuppressedRecipients, "listUnsubscribe": string(r.ListUnsubscribe)}
}
