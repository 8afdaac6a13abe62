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
	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/pgtest"
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
	fake   *fakeapi.Server
	client *client.Client
	worker *SendWorker
	seen   []Outcome
}

// newHarness gives a SendWorker over a fresh database and a fake API. The
// client's own waits are skipped, so its retries cost no time.
func newHarness(t *testing.T, cfg SendConfig, faults ...fakeapi.Fault) *harness {
	t.Helper()
	h := &harness{t: t, pool: pgtest.NewDB(t), fake: fakeapi.NewTest(t, fakeapi.Config{Faults: faults, Seed: 1})}
	var err error
	h.ob, err = outbox.New(h.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.client, err = client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()),
		client.WithSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = ObserverFunc(func(o Outcome) { h.seen = append(h.seen, o) })
	h.worker = NewSendWorker(h.pool, h.client, &cfg)
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

// work runs the intent's own job as River would on the given attempt.
func (h *harness) work(key string, attempt int) error {
	h.t.Helper()
	return h.workJob(key, *h.get(key).JobID, attempt)
}

// workJob runs the job with the given id for key.
func (h *harness) workJob(key string, jobID int64, attempt int) error {
	h.t.Helper()
	return h.worker.Work(context.Background(), newJob(key, jobID, attempt))
}

// job is the intent's own job as River runs it on the given attempt.
func (h *harness) job(key string, attempt int) *river.Job[outbox.SendArgs] {
	h.t.Helper()
	return newJob(key, *h.get(key).JobID, attempt)
}

func newJob(key string, id int64, attempt int) *river.Job[outbox.SendArgs] {
	return &river.Job[outbox.SendArgs]{
		JobRow: &rivertype.JobRow{ID: id, Attempt: attempt, MaxAttempts: outbox.DefaultMaxAttempts, Metadata: []byte("{}")},
		Args:   outbox.SendArgs{Key: key},
	}
}

func (h *harness) get(key string) *outbox.Record {
	h.t.Helper()
	rec, err := outbox.Get(context.Background(), h.pool, key)
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

func TestWorkSends(t *testing.T) {
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "invoice:inv_1", Payload: emailBody("ada@example.com")})
	if err := h.work("invoice:inv_1", 1); err != nil {
		t.Fatal(err)
	}
	rec := h.get("invoice:inv_1")
	d := h.fake.Deliveries()
	if rec.State != outbox.StateSent || rec.Replayed || len(d) != 1 || rec.MessageID != d[0].MessageID || d[0].IdempotencyKey != "invoice:inv_1" {
		t.Fatalf("record %+v, deliveries %+v", rec, d)
	}
	// The job running again (after a crash between recording and River's
	// completion) finds the intent sent and calls nothing.
	if err := h.work("invoice:inv_1", 2); err != nil {
		t.Fatal(err)
	}
	if n := len(h.fake.Requests()); n != 1 {
		t.Fatalf("%d API requests, want 1", n)
	}
	if got := fmt.Sprint(h.results()); got != "[sent skipped]" {
		t.Fatalf("outcomes %s", got)
	}
}

func TestWorkEveryKind(t *testing.T) {
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "k:batch", Kind: outbox.KindBatch,
		Payload: json.RawMessage(`{"emails":[` + string(emailBody("a@example.com")) + `,` + string(emailBody("b@example.com")) + `]}`)})
	h.enqueue(outbox.Intent{Key: "k:tmpl", Kind: outbox.KindTemplate, TemplateID: "welcome",
		Payload: json.RawMessage(`{"from":"hi@example.com","to":"c@example.com","props":{"name":"Ada"}}`)})
	h.enqueue(outbox.Intent{Key: "k:bc", Kind: outbox.KindBroadcast,
		Payload: json.RawMessage(`{"from":"news@example.com","subject":"News","html":"<p>hi</p>","audienceId":"aud_1"}`)})
	for _, key := range []string{"k:batch", "k:tmpl", "k:bc"} {
		if err := h.work(key, 1); err != nil {
			t.Fatalf("%s: %v", key, err)
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
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "invoice:crash", Payload: emailBody("ada@example.com")})
	crash := errors.New("worker killed")
	h.worker.afterSend = func(string) error { return crash }
	if err := h.work("invoice:crash", 1); !errors.Is(err, crash) {
		t.Fatalf("first run: %v", err)
	}
	if rec := h.get("invoice:crash"); rec.State != outbox.StateSending || rec.MessageID != "" {
		t.Fatalf("after the crash: %+v, want sending with no message id", rec)
	}

	h.worker.afterSend = nil
	if err := h.work("invoice:crash", 2); err != nil {
		t.Fatal(err)
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
	// The response is lost after delivery and the client is told not to
	// retry, so the job fails; River's next attempt replays.
	h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultDropAfter, Times: 1})
	h.client, _ = client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()), client.WithMaxRetries(0))
	h.worker.client = h.client
	h.enqueue(outbox.Intent{Key: "invoice:lost", Payload: emailBody("ada@example.com")})
	err := h.work("invoice:lost", 1)
	if err == nil || errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("first run: %v, want an error River retries", err)
	}
	if rec := h.get("invoice:lost"); rec.State != outbox.StatePending || rec.LastError == "" {
		t.Fatalf("after the lost response: %+v", rec)
	}
	if err := h.work("invoice:lost", 2); err != nil {
		t.Fatal(err)
	}
	if rec := h.get("invoice:lost"); !rec.Replayed || len(h.fake.Deliveries()) != 1 {
		t.Fatalf("%+v, %d deliveries", rec, len(h.fake.Deliveries()))
	}
}

func TestPermanentErrorFails(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 409, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: status})
			h.enqueue(outbox.Intent{Key: "k:perm", Payload: emailBody("ada@example.com")})
			err := h.work("k:perm", 1)
			var cancel *river.JobCancelError
			if !errors.As(err, &cancel) {
				t.Fatalf("error %v, want JobCancel", err)
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
			h := newHarness(t, SendConfig{RateLimitWait: 7 * time.Second}, tc.fault)
			h.enqueue(outbox.Intent{Key: "k:rl", Payload: emailBody("ada@example.com")})
			err := h.work("k:rl", 1)
			var snooze *river.JobSnoozeError
			if !errors.As(err, &snooze) || snooze.Duration != tc.want {
				t.Fatalf("error %v, want a snooze of %s", err, tc.want)
			}
			if rec := h.get("k:rl"); rec.State != outbox.StatePending || len(h.fake.Deliveries()) != 0 {
				t.Fatalf("record %+v", rec)
			}
		})
	}

	t.Run("cap on snoozes", func(t *testing.T) {
		h := newHarness(t, SendConfig{MaxSnoozes: 3}, fakeapi.Fault{Kind: fakeapi.FaultRateLimit})
		h.enqueue(outbox.Intent{Key: "k:cap", Payload: emailBody("ada@example.com")})
		// Snoozes give the attempt back, so River runs attempt 1 each time;
		// the count lives on the row.
		for i := range 3 {
			if err := h.work("k:cap", 1); !errors.As(err, new(*river.JobSnoozeError)) {
				t.Fatalf("snooze %d: error %v, want a snooze", i+1, err)
			}
		}
		if rec := h.get("k:cap"); rec.Snoozes != 3 || rec.Uncertain {
			t.Fatalf("after 3 snoozes: %+v", rec)
		}
		err := h.work("k:cap", 1)
		if !errors.As(err, new(*river.JobCancelError)) {
			t.Fatalf("error %v, want JobCancel", err)
		}
		if rec := h.get("k:cap"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 snoozes") {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestServerErrorsRetryThenFail(t *testing.T) {
	h := newHarness(t, SendConfig{MaxAttempts: 3}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503})
	h.enqueue(outbox.Intent{Key: "k:5xx", Payload: emailBody("ada@example.com")})
	for attempt := 1; attempt <= 2; attempt++ {
		err := h.work("k:5xx", attempt)
		if err == nil || errors.As(err, new(*river.JobCancelError)) {
			t.Fatalf("attempt %d: %v, want an error River retries", attempt, err)
		}
		if rec := h.get("k:5xx"); rec.State != outbox.StatePending || !strings.HasPrefix(rec.LastError, "503") {
			t.Fatalf("attempt %d: %+v", attempt, rec)
		}
	}
	// Each job attempt made the client's own three requests.
	if n := len(h.fake.Requests()); n != 6 {
		t.Fatalf("%d requests, want 6", n)
	}
	err := h.work("k:5xx", 3)
	if !errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("last attempt: %v, want JobCancel", err)
	}
	if rec := h.get("k:5xx"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 attempts") {
		t.Fatalf("record %+v", rec)
	}
}

func TestReplayWindow(t *testing.T) {
	ctx := context.Background()
	t.Run("first attempt too long ago", func(t *testing.T) {
		h := newHarness(t, SendConfig{ReplayWindow: time.Hour})
		h.enqueue(outbox.Intent{Key: "k:old", Payload: emailBody("ada@example.com")})
		if _, err := h.pool.Exec(ctx, `UPDATE sendonce_outbox SET first_attempt_at = now() - interval '2 hours', attempts = 4`); err != nil {
			t.Fatal(err)
		}
		err := h.work("k:old", 5)
		if !errors.As(err, new(*river.JobCancelError)) {
			t.Fatalf("error %v, want JobCancel", err)
		}
		if rec := h.get("k:old"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Fatalf("%d requests, want none", n)
		}
	})
	t.Run("next retry would pass the window", func(t *testing.T) {
		h := newHarness(t, SendConfig{ReplayWindow: time.Minute, RetryBase: 2 * time.Minute},
			fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 500})
		h.enqueue(outbox.Intent{Key: "k:win", Payload: emailBody("ada@example.com")})
		err := h.work("k:win", 1)
		if !errors.As(err, new(*river.JobCancelError)) {
			t.Fatalf("error %v, want JobCancel", err)
		}
		if rec := h.get("k:win"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
		if got := fmt.Sprint(h.results()); got != "[expired]" {
			t.Fatalf("outcomes %s", got)
		}
	})
	t.Run("snooze would pass the window", func(t *testing.T) {
		h := newHarness(t, SendConfig{ReplayWindow: time.Minute}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120"})
		h.enqueue(outbox.Intent{Key: "k:snz", Payload: emailBody("ada@example.com")})
		if err := h.work("k:snz", 1); !errors.As(err, new(*river.JobCancelError)) {
			t.Fatalf("error %v, want JobCancel", err)
		}
		if rec := h.get("k:snz"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestCanceledIntentIsNotSent(t *testing.T) {
	h := newHarness(t, SendConfig{})
	h.enqueue(outbox.Intent{Key: "k:cancel", Payload: emailBody("ada@example.com")})
	if _, err := h.ob.Cancel(context.Background(), "k:cancel"); err != nil {
		t.Fatal(err)
	}
	if err := h.work("k:cancel", 1); err != nil {
		t.Fatal(err)
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("%d requests for a canceled intent", n)
	}
}

func TestNextRetry(t *testing.T) {
	w := NewSendWorker(nil, nil, &SendConfig{RetryBase: time.Second, RetryMax: 10 * time.Second})
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 30: 10 * time.Second} {
		at := w.NextRetry(&river.Job[outbox.SendArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}})
		got := time.Until(at)
		if got > want || got < want*9/10-50*time.Millisecond {
			t.Errorf("attempt %d: next retry in %s, want within [%s, %s]", attempt, got, want*9/10, want)
		}
	}
}

func TestInsecureBaseURLFailsAtOnce(t *testing.T) {
	h := newHarness(t, SendConfig{})
	c, err := client.New(client.WithAPIKey(testKey), client.WithBaseURL("http://mail.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	h.worker.client = c
	h.enqueue(outbox.Intent{Key: "k:insecure", Payload: emailBody("ada@example.com")})
	if err := h.work("k:insecure", 1); !errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("error %v, want JobCancel: no retry can fix the base URL", err)
	}
	if rec := h.get("k:insecure"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "plain http") {
		t.Fatalf("record %+v", rec)
	}
}
