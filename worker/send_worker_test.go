package worker

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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testKey = "oe_test_worker0000000000"

func emailBody(to string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"from":"billing@example.com","to":[%q],"subject":"Invoice","text":"Attached."}`, to))
}

type harness struct {
	t      *testing.T
	pool   *pgxpool.Pool
	ob     *outbox.Outbox
	river  *river.Client[pgx.Tx] // insert-only: reads the intents' jobs
	fake   *fakeapi.Server
	client *client.Client
	worker *sendWorker
	seen   []Outcome
	// ownJobs are the jobs intents were enqueued with, by key (freeze).
	ownJobs map[string]int64
}

// newHarness gives a sendWorker over a fresh database and a fake API. The
// client's own waits are skipped, so its retries cost no time.
func newHarness(t *testing.T, cfg SendConfig, faults ...fakeapi.Fault) *harness {
	t.Helper()
	h := &harness{t: t, pool: pgtest.NewDB(t), ownJobs: map[string]int64{}, fake: fakeapi.NewTest(t, fakeapi.Config{Faults: faults, Seed: 1})}
	var err error
	h.ob, err = outbox.New(h.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.river, err = river.NewClient(riverpgxv5.New(h.pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.client, err = client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()),
		client.WithSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = ObserverFunc(func(o Outcome) { h.seen = append(h.seen, o) })
	h.worker = newSendWorker(h.pool, h.client, &cfg)
	return h
}

func (h *harness) enqueue(in outbox.Intent) *outbox.Record {
	h.t.Helper()
	var rec *outbox.Record
	err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
		res, err := h.ob.Enqueue(context.Background(), tx, in)
		if err == nil {
			rec = res.Record
		}
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

// work runs the intent's own River job through rivertest as River's
// attempt-th attempt, and returns what River made of it and the error the
// worker handed River's error handler (nil for a snooze or a cancel).
func (h *harness) work(key string, attempt int) (*rivertest.WorkResult, error) {
	h.t.Helper()
	return h.workJob(*h.get(key).JobID, attempt)
}

// workJob runs the River job with the given id as its attempt-th attempt.
// rivertest counts the attempt up as it starts the job, so the row is set
// to the one before. A job River has finished is made available again
// first: River runs a finished job again only when a crash lost its
// completion and the rescuer put it back, which is what a test working it
// again stands for. River's update of the job commits with the attempt;
// the worker writes the intent's row through the pool meanwhile, and never
// touches river_job, so the transaction holds nothing the worker waits for.
func (h *harness) workJob(jobID int64, attempt int) (*rivertest.WorkResult, error) {
	h.t.Helper()
	return workAs(h, jobID, attempt, river.Worker[sendjob.Args](h.worker))
}

// workAs is workJob with any worker: the send worker or the batch worker.
func workAs[T river.JobArgs](h *harness, jobID int64, attempt int, worker river.Worker[T]) (*rivertest.WorkResult, error) {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `UPDATE river_job SET attempt = $2,
		state = CASE WHEN finalized_at IS NULL THEN state ELSE 'available' END, finalized_at = NULL
		WHERE id = $1`, jobID, attempt-1); err != nil {
		h.t.Fatal(err)
	}
	row, err := h.river.JobGetTx(ctx, tx, jobID)
	if err != nil {
		h.t.Fatal(err)
	}
	w := rivertest.NewWorker[T](h.t, riverpgxv5.New(h.pool), &river.Config{}, worker)
	res, workErr := w.WorkJob(ctx, h.t, tx, row)
	if res == nil {
		h.t.Fatalf("job %d not worked: %v", jobID, workErr)
	}
	if err := tx.Commit(ctx); err != nil {
		h.t.Fatal(err)
	}
	return res, workErr
}

// job is the intent's own River job, read from river_job, as River hands it
// to the worker on its attempt-th attempt.
func (h *harness) job(key string, attempt int) *river.Job[sendjob.Args] {
	h.t.Helper()
	row, err := h.river.JobGet(context.Background(), *h.get(key).JobID)
	if err != nil {
		h.t.Fatal(err)
	}
	var args sendjob.Args
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		h.t.Fatal(err)
	}
	row.Attempt = attempt
	return &river.Job[sendjob.Args]{JobRow: row, Args: args}
}

func (h *harness) get(key string) *outbox.Record {
	h.t.Helper()
	rec, err := h.ob.Get(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

func (h *harness) results() []Result {
	var rs []Result
	for _, o := range h.seen {
		rs = append(rs, o.Result)
	}
	return rs
}

// What River did with a job after an attempt, as its row shows it.

// completed: the worker returned nil.
func completed(res *rivertest.WorkResult) bool {
	return res.EventKind == river.EventKindJobCompleted && res.Job.State == rivertype.JobStateCompleted
}

// retried: the attempt failed and River runs the job again (now, or at
// its next retry).
func retried(res *rivertest.WorkResult) bool {
	return res.EventKind == river.EventKindJobFailed &&
		(res.Job.State == rivertype.JobStateRetryable || res.Job.State == rivertype.JobStateAvailable)
}

// cancelled: River will never run the job again.
func cancelled(res *rivertest.WorkResult) bool {
	return res.EventKind == river.EventKindJobCancelled && res.Job.State == rivertype.JobStateCancelled
}

// snoozed: River runs the job again after a wait, and gave the attempt
// back (it is not counted).
func snoozed(res *rivertest.WorkResult, attempt int) bool {
	return res.EventKind == river.EventKindJobSnoozed && res.Job.Attempt == attempt-1 &&
		(res.Job.State == rivertype.JobStateScheduled || res.Job.State == rivertype.JobStateAvailable)
}

func show(res *rivertest.WorkResult, err error) string {
	return fmt.Sprintf("%s (job %s, attempt %d, scheduled at %s), error %v",
		res.EventKind, res.Job.State, res.Job.Attempt, res.Job.ScheduledAt.Format(time.RFC3339Nano), err)
}

func TestWorkSends(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "invoice:inv_1", Payload: emailBody("ada@example.com")})
	if res, err := h.work("invoice:inv_1", 1); err != nil || !completed(res) {
		t.Fatalf("first run: %s, want completed", show(res, err))
	}
	rec := h.get("invoice:inv_1")
	d := h.fake.Deliveries()
	if rec.State != outbox.StateSent || rec.Replayed || len(d) != 1 || rec.MessageID != d[0].MessageID || d[0].IdempotencyKey != "invoice:inv_1" {
		t.Fatalf("record %+v, deliveries %+v", rec, d)
	}
	// The job running again (after a crash between recording and River's
	// completion) finds the intent sent and calls nothing.
	if res, err := h.work("invoice:inv_1", 2); err != nil || !completed(res) {
		t.Fatalf("second run: %s, want completed", show(res, err))
	}
	if n := len(h.fake.Requests()); n != 1 {
		t.Fatalf("%d API requests, want 1", n)
	}
	if got := fmt.Sprint(h.results()); got != "[sent skipped]" {
		t.Fatalf("outcomes %s", got)
	}
}

func TestWorkEveryKind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "k:batch", Kind: outbox.KindBatch,
		Payload: json.RawMessage(`{"emails":[` + string(emailBody("a@example.com")) + `,` + string(emailBody("b@example.com")) + `]}`)})
	h.enqueue(outbox.Intent{Key: "k:tmpl", Kind: outbox.KindTemplate, TemplateID: "welcome",
		Payload: json.RawMessage(`{"from":"hi@example.com","to":"c@example.com","props":{"name":"Ada"}}`)})
	h.enqueue(outbox.Intent{Key: "k:bc", Kind: outbox.KindBroadcast,
		Payload: json.RawMessage(`{"from":"news@example.com","subject":"News","html":"<p>hi</p>","audienceId":"aud_1"}`)})
	for _, key := range []string{"k:batch", "k:tmpl", "k:bc"} {
		if res, err := h.work(key, 1); err != nil || !completed(res) {
			t.Fatalf("%s: %s, want completed", key, show(res, err))
		}
		if rec := h.get(key); rec.State != outbox.StateSent || rec.MessageID == "" {
			t.Fatalf("%s: %+v", key, rec)
		}
	}
	if ids := strings.Split(h.get("k:batch").MessageID, ","); len(ids) != 2 {
		t.Fatalf("batch message ids %v, want 2", ids)
	}
	if n := len(h.fake.DeliveriesTo("c@example.com")); n != 1 {
		t.Fatalf("template deliveries %d", n)
	}
}

// TestCrashAfterAcceptReplays is the product's promise, made deterministic:
// the API delivers, the worker dies before the outbox records it, and the
// job's next run replays the send instead of repeating it.
func TestCrashAfterAcceptReplays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "invoice:crash", Payload: emailBody("ada@example.com")})
	crash := errors.New("worker killed")
	h.worker.afterSend = func(string) error { return crash }
	if res, err := h.work("invoice:crash", 1); !errors.Is(err, crash) || !retried(res) {
		t.Fatalf("first run: %s, want the crash, retried", show(res, err))
	}
	if rec := h.get("invoice:crash"); rec.State != outbox.StateSending || rec.MessageID != "" {
		t.Fatalf("after the crash: %+v, want sending with no message id", rec)
	}

	h.worker.afterSend = nil
	if res, err := h.work("invoice:crash", 2); err != nil || !completed(res) {
		t.Fatalf("rerun: %s, want completed", show(res, err))
	}
	rec := h.get("invoice:crash")
	d := h.fake.Deliveries()
	if len(d) != 1 {
		t.Fatalf("%d deliveries, want 1", len(d))
	}
	if rec.State != outbox.StateSent || !rec.Replayed || rec.MessageID != d[0].MessageID || rec.Attempts != 2 {
		t.Fatalf("after the rerun: %+v, want sent, replayed, message %s", rec, d[0].MessageID)
	}
}

func TestLostResponseReplays(t *testing.T) {
	t.Parallel()
	// The response is lost after delivery and the client is told not to
	// retry, so the job fails; River's next attempt replays.
	h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultDropAfter, Times: 1})
	h.client, _ = client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()), client.WithMaxRetries(0))
	h.worker.client = h.client
	h.enqueue(outbox.Intent{Key: "invoice:lost", Payload: emailBody("ada@example.com")})
	if res, err := h.work("invoice:lost", 1); err == nil || !retried(res) {
		t.Fatalf("first run: %s, want an error River retries", show(res, err))
	}
	if rec := h.get("invoice:lost"); rec.State != outbox.StatePending || rec.LastError == "" {
		t.Fatalf("after the lost response: %+v", rec)
	}
	if res, err := h.work("invoice:lost", 2); err != nil || !completed(res) {
		t.Fatalf("second run: %s, want completed", show(res, err))
	}
	if rec := h.get("invoice:lost"); !rec.Replayed || len(h.fake.Deliveries()) != 1 {
		t.Fatalf("%+v, %d deliveries", rec, len(h.fake.Deliveries()))
	}
}

func TestPermanentErrorFails(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 401, 403, 404, 409, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: status})
			h.enqueue(outbox.Intent{Key: "k:perm", Payload: emailBody("ada@example.com")})
			if res, err := h.work("k:perm", 1); err != nil || !cancelled(res) {
				t.Fatalf("%s, want cancelled", show(res, err))
			}
			rec := h.get("k:perm")
			if rec.State != outbox.StateFailed || !strings.HasPrefix(rec.LastError, fmt.Sprint(status)) {
				t.Fatalf("record %+v", rec)
			}
			if n := len(h.fake.Requests()); n != 1 {
				t.Fatalf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestRateLimitSnoozes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fault fakeapi.Fault
		want  time.Duration
	}{
		{"retry-after over a minute", fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120"}, 120 * time.Second},
		{"503 with retry-after 90.5", fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, Status: 503, RetryAfter: "90.5"}, 90500 * time.Millisecond},
		{"429 without retry-after", fakeapi.Fault{Kind: fakeapi.FaultRateLimit}, 7 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, SendConfig{RateLimitWait: 7 * time.Second}, tc.fault)
			h.enqueue(outbox.Intent{Key: "k:rl", Payload: emailBody("ada@example.com")})
			before := time.Now()
			res, err := h.work("k:rl", 1)
			after := time.Now()
			// River schedules the job the snooze's wait after the attempt
			// ended (as the database stores it, to the microsecond).
			earliest := before.Add(tc.want).Truncate(time.Microsecond)
			if err != nil || !snoozed(res, 1) || res.Job.ScheduledAt.Before(earliest) || res.Job.ScheduledAt.After(after.Add(tc.want)) {
				t.Fatalf("%s, want a snooze of %s (between %s and %s)", show(res, err), tc.want,
					earliest.Format(time.RFC3339Nano), after.Add(tc.want).Format(time.RFC3339Nano))
			}
			if rec := h.get("k:rl"); rec.State != outbox.StatePending || len(h.fake.Deliveries()) != 0 {
				t.Fatalf("record %+v", rec)
			}
		})
	}

	// A 503 with a Retry-After over a minute snoozes, at most MaxSnoozes
	// times; a 429 never parks an intent (TestRateLimitNeverParks).
	t.Run("cap on snoozes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{MaxSnoozes: 3}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120", Status: 503})
		h.enqueue(outbox.Intent{Key: "k:cap", Payload: emailBody("ada@example.com")})
		// Snoozes give the attempt back (snoozed checks it), so River runs
		// attempt 1 each time; the count lives on the row.
		for i := range 3 {
			if res, err := h.work("k:cap", 1); err != nil || !snoozed(res, 1) {
				t.Fatalf("snooze %d: %s, want a snooze", i+1, show(res, err))
			}
		}
		if rec := h.get("k:cap"); rec.Snoozes != 3 {
			t.Fatalf("after 3 snoozes: %+v", rec)
		}
		if res, err := h.work("k:cap", 1); err != nil || !cancelled(res) {
			t.Fatalf("%s, want cancelled", show(res, err))
		}
		if rec := h.get("k:cap"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 snoozes") {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestServerErrorsRetryThenFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{MaxAttempts: 3}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503})
	h.enqueue(outbox.Intent{Key: "k:5xx", Payload: emailBody("ada@example.com")})
	for attempt := 1; attempt <= 2; attempt++ {
		if res, err := h.work("k:5xx", attempt); err == nil || !retried(res) {
			t.Fatalf("attempt %d: %s, want an error River retries", attempt, show(res, err))
		}
		if rec := h.get("k:5xx"); rec.State != outbox.StatePending || !strings.HasPrefix(rec.LastError, "503") {
			t.Fatalf("attempt %d: %+v", attempt, rec)
		}
	}
	// Each job attempt made the client's own three requests.
	if n := len(h.fake.Requests()); n != 6 {
		t.Fatalf("%d requests, want 6", n)
	}
	if res, err := h.work("k:5xx", 3); err != nil || !cancelled(res) {
		t.Fatalf("last attempt: %s, want cancelled", show(res, err))
	}
	if rec := h.get("k:5xx"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 attempts") {
		t.Fatalf("record %+v", rec)
	}
}

func TestReplayWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("first attempt too long ago", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{ReplayWindow: time.Hour})
		h.enqueue(outbox.Intent{Key: "k:old", Payload: emailBody("ada@example.com")})
		if _, err := h.pool.Exec(ctx, `UPDATE sendonce_outbox SET first_attempt_at = now() - interval '2 hours', attempts = 4`); err != nil {
			t.Fatal(err)
		}
		if res, err := h.work("k:old", 5); err != nil || !cancelled(res) {
			t.Fatalf("%s, want cancelled", show(res, err))
		}
		if rec := h.get("k:old"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Fatalf("%d requests, want none", n)
		}
	})
	t.Run("next retry would pass the window", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{ReplayWindow: time.Minute, RetryBase: 2 * time.Minute},
			fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 500})
		h.enqueue(outbox.Intent{Key: "k:win", Payload: emailBody("ada@example.com")})
		if res, err := h.work("k:win", 1); err != nil || !cancelled(res) {
			t.Fatalf("%s, want cancelled", show(res, err))
		}
		if rec := h.get("k:win"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
		if got := fmt.Sprint(h.results()); got != "[expired]" {
			t.Fatalf("outcomes %s", got)
		}
	})
	t.Run("snooze would pass the window", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{ReplayWindow: time.Minute}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120"})
		h.enqueue(outbox.Intent{Key: "k:snz", Payload: emailBody("ada@example.com")})
		if res, err := h.work("k:snz", 1); err != nil || !cancelled(res) {
			t.Fatalf("%s, want cancelled", show(res, err))
		}
		if rec := h.get("k:snz"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestCanceledIntentIsNotSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{})
	rec := h.enqueue(outbox.Intent{Key: "k:cancel", Payload: emailBody("ada@example.com")})
	// A worker fetched the job before the cancel and has not claimed the
	// intent yet. Cancel cannot finalize a running job (River leaves that
	// to the job's client), so the job goes on to run.
	if _, err := h.pool.Exec(context.Background(),
		`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, *rec.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ob.Cancel(context.Background(), "k:cancel"); err != nil {
		t.Fatal(err)
	}
	if res, err := h.work("k:cancel", 1); err != nil || !completed(res) {
		t.Fatalf("%s, want completed", show(res, err))
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("%d requests for a canceled intent", n)
	}
}

func TestNextRetry(t *testing.T) {
	t.Parallel()
	w := newSendWorker(nil, nil, &SendConfig{RetryBase: time.Second, RetryMax: 10 * time.Second})
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 30: 10 * time.Second} {
		at := w.NextRetry(&river.Job[sendjob.Args]{JobRow: &rivertype.JobRow{Attempt: attempt}})
		got := time.Until(at)
		if got > want || got < want*9/10-50*time.Millisecond {
			t.Errorf("attempt %d: next retry in %s, want within [%s, %s]", attempt, got, want*9/10, want)
		}
	}
}

func TestInsecureBaseURLFailsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{})
	c, err := client.New(client.WithAPIKey(testKey), client.WithBaseURL("http://mail.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	h.worker.client = c
	h.enqueue(outbox.Intent{Key: "k:insecure", Payload: emailBody("ada@example.com")})
	if res, err := h.work("k:insecure", 1); err != nil || !cancelled(res) {
		t.Fatalf("%s, want cancelled: no retry can fix the base URL", show(res, err))
	}
	if rec := h.get("k:insecure"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "plain http") {
		t.Fatalf("record %+v", rec)
	}
}

// A 429 never parks an intent, however often it comes: rate limits wait
// (issue 12), bounded only by the replay window.
func TestRateLimitNeverParks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{MaxSnoozes: 2}, fakeapi.Fault{Kind: fakeapi.FaultRateLimit})
	h.enqueue(outbox.Intent{Key: "k:429", Payload: emailBody("ada@example.com")})
	for i := range 5 {
		if res, err := h.work("k:429", 1); err != nil || !snoozed(res, 1) {
			t.Fatalf("429 number %d: %s, want a snooze", i+1, show(res, err))
		}
	}
	if rec := h.get("k:429"); rec.State != outbox.StatePending || rec.Snoozes != 0 {
		t.Fatalf("after five 429s: %+v, want pending with no snooze counted", rec)
	}
	h.fake.SetFaults()
	if res, err := h.work("k:429", 1); err != nil || !completed(res) {
		t.Fatalf("after the limit lifted: %s", show(res, err))
	}
}
