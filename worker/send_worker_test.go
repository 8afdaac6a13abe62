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
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
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
	// perJob gives every intent enqueued a River job of its own
	// (outboxtest.GiveJobs), as a database upgraded from a release before
	// the drain holds them: try then works the job, not the drain.
	perJob bool
	// lease is the one the drained attempts (try, drainOne) are claimed
	// under, taken at the first of them.
	lease sendstate.Lease
}

// path is how an intent reaches the send worker: the drain, which sends
// every intent enqueued now, or a River job of its own, which only a
// database upgraded from a release before the drain holds (issue 44).
type path struct {
	name   string
	perJob bool
}

var paths = []path{{"drained", false}, ownJob}

// ownJob is the path of an intent with a River job of its own, as a
// database upgraded from a release before the drain holds: the path of the
// tests of the machinery that works such jobs (per-job coalescing,
// superseded jobs, the River UI's retry).
var ownJob = path{"own job", true}

// onPaths runs f, in parallel, on each path.
func onPaths(t *testing.T, f func(t *testing.T, p path)) {
	t.Helper()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f(t, p)
		})
	}
}

// on sets the path the harness's intents take.
func (h *harness) on(p path) *harness {
	h.perJob = p.perJob
	return h
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
	if h.perJob {
		outboxtest.GiveJobs(h.t, h.pool, in.Key)
		rec = h.get(in.Key)
	}
	return rec
}

// tried is what became of one attempt of an intent, on either path.
type tried struct {
	// end is "completed" (sent, or a job that found nothing to do),
	// "retried" (tried again later, the attempt counted), "snoozed" (tried
	// again after a wait, the attempt given back), "cancelled" (never
	// tried again), or, drained, "unclaimed" (the drain claimed nothing).
	end string
	// again is when the intent is tried again (retried, snoozed).
	again time.Time
	// rateLimited is the intent's 429s in a row after the attempt: its
	// job's metadata, or its row's rate_limited.
	rateLimited int
	err         error // the error the attempt ended in (its River job's, or the drained send's)
	desc        string
}

func (r tried) String() string { return r.desc }

// try makes the intent's attempt-th attempt (as River numbers a job's
// attempts) on the harness's path. Per job, it works the intent's job
// (work). Drained, it makes the intent due now with attempt-1 tries
// counted, as River makes a job available for its attempt-th attempt
// (first in due order, before any other intent due), and has the drain
// claim it (sendstate.ClaimDue) and send it (drain.send);
// what became of it is read from its row.
func (h *harness) try(key string, attempt int) tried {
	h.t.Helper()
	if h.perJob {
		res, err := h.work(key, attempt)
		r := tried{err: err, again: res.Job.ScheduledAt, rateLimited: rateLimitedBefore(res.Job), desc: show(res, err)}
		switch {
		case completed(res):
			r.end = "completed"
		case retried(res):
			r.end = "retried"
		case cancelled(res):
			r.end = "cancelled"
		case snoozed(res, attempt):
			r.end = "snoozed"
		}
		return r
	}
	pgtest.Exec(h.t, h.pool, `UPDATE sendonce_outbox SET tries = $2, next_attempt_at = '-infinity'
		WHERE idempotency_key = $1 AND state = 'pending' AND job_id IS NULL`, key, attempt-1)
	c, err := h.drainOne()
	if c == nil {
		return tried{end: "unclaimed", err: err, desc: fmt.Sprintf("nothing claimed, error %v", err)}
	}
	if c.Record.Key != key {
		h.t.Fatalf("the drain claimed %s, want %s", c.Record.Key, key)
	}
	var state string
	var tries, limited int
	var next *time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT state, tries, next_attempt_at, rate_limited FROM sendonce_outbox WHERE idempotency_key = $1`,
		key).Scan(&state, &tries, &next, &limited); err != nil {
		h.t.Fatal(err)
	}
	r := tried{err: err, rateLimited: limited}
	if next != nil {
		r.again = *next
	}
	switch {
	case state == string(outbox.StateSent):
		r.end = "completed"
	case state != string(outbox.StatePending):
		r.end = "cancelled"
	case tries == attempt:
		r.end = "retried"
	case tries == attempt-1:
		r.end = "snoozed"
	}
	r.desc = fmt.Sprintf("drained: %s (row %s, tries %d, next attempt at %v), error %v", r.end, state, tries, next, err)
	return r
}

// pick is perJob on a River job's path, drained on the drain's.
func (h *harness) pick(perJob, drained string) string {
	if h.perJob {
		return perJob
	}
	return drained
}

// drainOne has the drain claim one due intent (nil: none was due) under
// the harness's lease and send it as a drain slot does (drain.send), and
// returns the error the attempt ended in.
func (h *harness) drainOne() (*sendstate.DrainClaim, error) {
	h.t.Helper()
	return h.drainOneIn(context.Background())
}

// drainOneIn is drainOne with the send made in ctx, as a drain's sends are
// made in its work context, which a stop that gives up waiting cancels.
func (h *harness) drainOneIn(work context.Context) (*sendstate.DrainClaim, error) {
	h.t.Helper()
	ctx := context.Background()
	if h.lease.Epoch == 0 {
		l, err := sendstate.TakeLease(ctx, h.pool, sendstate.Lease{}, sendstate.Holder{Host: h.t.Name(), PID: 1}, sendstate.DefaultLease)
		if err != nil {
			h.t.Fatal(err)
		}
		h.lease = l
	}
	w := h.worker
	d := &drain{w: w, timeout: time.Minute, interval: 10 * time.Millisecond, work: work}
	// A slot takes a token of the fleet's budget first (with one), and
	// claims nothing without one: it waits for the budget, for a second
	// here.
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	leasedAt, token, err := d.token(tctx, false)
	cancel()
	if w.budget != nil && (err != nil || !token) {
		return nil, nil
	}
	opts, err := w.claimOptions()
	if err != nil {
		h.t.Fatal(err)
	}
	opts.Owner = h.lease.Epoch
	cs, err := sendstate.ClaimDue(ctx, h.pool, 1, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(cs) == 0 {
		if token {
			w.budget.Return(1)
		}
		return nil, nil
	}
	var sendErr error
	hook := w.afterSend
	w.afterSend = func(key string) error {
		if hook != nil {
			sendErr = hook(key)
		}
		return sendErr
	}
	defer func() { w.afterSend = hook }()
	d.send(cs[0], leasedAt, token)
	return cs[0], sendErr
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

// expect fails the test unless the attempt ended in end, and, on a River
// job, in an error exactly when wantErr (what River's error handler is
// handed; a drained attempt's is recorded on its row alone).
func (h *harness) expect(r tried, end string, wantErr bool, what string) {
	h.t.Helper()
	if r.end != end || (h.perJob && (r.err != nil) != wantErr) {
		h.t.Fatalf("%s: %s, want %s (an error: %v)", what, r, end, wantErr)
	}
}

func TestWorkSends(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.enqueue(outbox.Intent{Key: "invoice:inv_1", Payload: emailBody("ada@example.com")})
		h.expect(h.try("invoice:inv_1", 1), "completed", false, "first run")
		rec := h.get("invoice:inv_1")
		d := h.fake.Deliveries()
		if rec.State != outbox.StateSent || rec.Replayed || len(d) != 1 || rec.MessageID != d[0].MessageID || d[0].IdempotencyKey != "invoice:inv_1" {
			t.Fatalf("record %+v, deliveries %+v", rec, d)
		}
		// The job running again (after a crash between recording and
		// River's completion) finds the intent sent and calls nothing;
		// the drain does not claim a sent intent at all.
		want := "[sent]"
		if p.perJob {
			h.expect(h.try("invoice:inv_1", 2), "completed", false, "second run")
			want = "[sent skipped]"
		} else {
			h.expect(h.try("invoice:inv_1", 2), "unclaimed", false, "second claim")
		}
		if n := len(h.fake.Requests()); n != 1 {
			t.Fatalf("%d API requests, want 1", n)
		}
		if got := fmt.Sprint(h.results()); got != want {
			t.Fatalf("outcomes %s, want %s", got, want)
		}
	})
}

func TestWorkEveryKind(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.enqueue(outbox.Intent{Key: "k:batch", Kind: outbox.KindBatch,
			Payload: json.RawMessage(`{"emails":[` + string(emailBody("a@example.com")) + `,` + string(emailBody("b@example.com")) + `]}`)})
		h.enqueue(outbox.Intent{Key: "k:tmpl", Kind: outbox.KindTemplate, TemplateID: "welcome",
			Payload: json.RawMessage(`{"from":"hi@example.com","to":"c@example.com","props":{"name":"Ada"}}`)})
		h.enqueue(outbox.Intent{Key: "k:bc", Kind: outbox.KindBroadcast,
			Payload: json.RawMessage(`{"from":"news@example.com","subject":"News","html":"<p>hi</p>","audienceId":"aud_1"}`)})
		for _, key := range []string{"k:batch", "k:tmpl", "k:bc"} {
			h.expect(h.try(key, 1), "completed", false, key)
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
	})
}

// TestCrashAfterAcceptReplays is the product's promise, made deterministic:
// the API delivers, the worker dies before the outbox records it, and the
// intent's next attempt replays the send instead of repeating it. A River
// job runs again with the intent left sending; a drained intent whose
// outcome was not recorded goes back to the drain, pending and uncertain,
// its try given back (as after a crash the sweeper's RescueDrained does).
func TestCrashAfterAcceptReplays(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.enqueue(outbox.Intent{Key: "invoice:crash", Payload: emailBody("ada@example.com")})
		crash := errors.New("worker killed")
		h.worker.afterSend = func(string) error { return crash }
		r := h.try("invoice:crash", 1)
		rec := h.get("invoice:crash")
		switch {
		case !errors.Is(r.err, crash):
			t.Fatalf("first run: %s, want the crash", r)
		case p.perJob && (r.end != "retried" || rec.State != outbox.StateSending || rec.MessageID != ""):
			t.Fatalf("first run: %s, %+v; want retried, the intent sending with no message id", r, rec)
		case !p.perJob && (r.end != "snoozed" || rec.State != outbox.StatePending || !rec.Uncertain || rec.MessageID != "" || r.again.After(time.Now())):
			t.Fatalf("first run: %s, %+v; want it pending, uncertain, due at once, its try given back, no message id", r, rec)
		}

		h.worker.afterSend = nil
		h.expect(h.try("invoice:crash", 2), "completed", false, "rerun")
		rec = h.get("invoice:crash")
		d := h.fake.Deliveries()
		if len(d) != 1 {
			t.Fatalf("%d deliveries, want 1", len(d))
		}
		if rec.State != outbox.StateSent || !rec.Replayed || rec.MessageID != d[0].MessageID || rec.Attempts != 2 {
			t.Fatalf("after the rerun: %+v, want sent, replayed, message %s", rec, d[0].MessageID)
		}
	})
}

func TestLostResponseReplays(t *testing.T) {
	t.Parallel()
	// The response is lost after delivery and the client is told not to
	// retry, so the attempt fails; the next attempt replays.
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultDropAfter, Times: 1}).on(p)
		h.client, _ = client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()), client.WithMaxRetries(0))
		h.worker.client = h.client
		h.enqueue(outbox.Intent{Key: "invoice:lost", Payload: emailBody("ada@example.com")})
		before := time.Now()
		r := h.try("invoice:lost", 1)
		h.expect(r, "retried", true, "first run")
		if !p.perJob && r.again.Before(before.Add(h.worker.cfg.RetryBase*9/10)) {
			t.Fatalf("first run: %s, want the retry RetryBase (%s, less jitter) later", r, h.worker.cfg.RetryBase)
		}
		if rec := h.get("invoice:lost"); rec.State != outbox.StatePending || rec.LastError == "" {
			t.Fatalf("after the lost response: %+v", rec)
		}
		h.expect(h.try("invoice:lost", 2), "completed", false, "second run")
		if rec := h.get("invoice:lost"); !rec.Replayed || len(h.fake.Deliveries()) != 1 {
			t.Fatalf("%+v, %d deliveries", rec, len(h.fake.Deliveries()))
		}
	})
}

func TestPermanentErrorFails(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 401, 403, 404, 409, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			onPaths(t, func(t *testing.T, p path) {
				h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: status}).on(p)
				h.enqueue(outbox.Intent{Key: "k:perm", Payload: emailBody("ada@example.com")})
				h.expect(h.try("k:perm", 1), "cancelled", false, "the attempt")
				rec := h.get("k:perm")
				if rec.State != outbox.StateFailed || !strings.HasPrefix(rec.LastError, fmt.Sprint(status)) {
					t.Fatalf("record %+v", rec)
				}
				if n := len(h.fake.Requests()); n != 1 {
					t.Fatalf("%d requests, want 1 (no retry)", n)
				}
				if !p.perJob {
					h.expect(h.try("k:perm", 2), "unclaimed", false, "the next claim")
				}
			})
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
			onPaths(t, func(t *testing.T, p path) {
				h := newHarness(t, SendConfig{RateLimitWait: 7 * time.Second}, tc.fault).on(p)
				h.enqueue(outbox.Intent{Key: "k:rl", Payload: emailBody("ada@example.com")})
				before := time.Now()
				r := h.try("k:rl", 1)
				after := time.Now()
				// The intent is due again the snooze's wait after the
				// attempt ended (as the database stores it, to the
				// microsecond): the job's scheduled_at, the row's
				// next_attempt_at.
				earliest := before.Add(tc.want).Truncate(time.Microsecond)
				if h.expect(r, "snoozed", false, "the attempt"); r.again.Before(earliest) || r.again.After(after.Add(tc.want)) {
					t.Fatalf("%s, want a snooze of %s (between %s and %s)", r, tc.want,
						earliest.Format(time.RFC3339Nano), after.Add(tc.want).Format(time.RFC3339Nano))
				}
				if rec := h.get("k:rl"); rec.State != outbox.StatePending || len(h.fake.Deliveries()) != 0 {
					t.Fatalf("record %+v", rec)
				}
				if !p.perJob {
					if c, _ := h.drainOne(); c != nil {
						t.Fatalf("the drain claimed %s before the snooze's wait ended", c.Record.Key)
					}
				}
			})
		})
	}

	// A 503 with a Retry-After over a minute snoozes, at most MaxSnoozes
	// times; a 429 never parks an intent (TestRateLimitNeverParks).
	t.Run("cap on snoozes", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{MaxSnoozes: 3}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120", Status: 503}).on(p)
			h.enqueue(outbox.Intent{Key: "k:cap", Payload: emailBody("ada@example.com")})
			// Snoozes give the attempt back (snoozed checks it), so each
			// is attempt 1; the count lives on the row.
			for i := range 3 {
				h.expect(h.try("k:cap", 1), "snoozed", false, fmt.Sprintf("snooze %d", i+1))
			}
			if rec := h.get("k:cap"); rec.Snoozes != 3 {
				t.Fatalf("after 3 snoozes: %+v", rec)
			}
			h.expect(h.try("k:cap", 1), "cancelled", false, "the fourth")
			if rec := h.get("k:cap"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 snoozes") {
				t.Fatalf("record %+v", rec)
			}
		})
	})
}

func TestServerErrorsRetryThenFail(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{MaxAttempts: 3}, fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503}).on(p)
		h.enqueue(outbox.Intent{Key: "k:5xx", Payload: emailBody("ada@example.com")})
		for attempt := 1; attempt <= 2; attempt++ {
			before := time.Now()
			r := h.try("k:5xx", attempt)
			h.expect(r, "retried", true, fmt.Sprintf("attempt %d", attempt))
			// A drained retry waits as River's backoff spaces a job's:
			// RetryBase·2^(attempt-1), less up to 10% jitter.
			if d := h.worker.cfg.retryDelay(attempt); !p.perJob && (r.again.Before(before.Add(d*9/10)) || r.again.After(time.Now().Add(d))) {
				t.Fatalf("attempt %d: %s, want the next in %s, less up to 10%%", attempt, r, d)
			}
			if rec := h.get("k:5xx"); rec.State != outbox.StatePending || !strings.HasPrefix(rec.LastError, "503") {
				t.Fatalf("attempt %d: %+v", attempt, rec)
			}
		}
		// Each attempt made the client's own three requests.
		if n := len(h.fake.Requests()); n != 6 {
			t.Fatalf("%d requests, want 6", n)
		}
		h.expect(h.try("k:5xx", 3), "cancelled", false, "last attempt")
		if rec := h.get("k:5xx"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "gave up after 3 attempts") {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestReplayWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("first attempt too long ago", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{ReplayWindow: time.Hour}).on(p)
			h.enqueue(outbox.Intent{Key: "k:old", Payload: emailBody("ada@example.com")})
			if _, err := h.pool.Exec(ctx, `UPDATE sendonce_outbox SET first_attempt_at = now() - interval '2 hours', attempts = 4`); err != nil {
				t.Fatal(err)
			}
			h.expect(h.try("k:old", 5), "cancelled", false, "the attempt")
			if rec := h.get("k:old"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
				t.Fatalf("record %+v", rec)
			}
			if n := len(h.fake.Requests()); n != 0 {
				t.Fatalf("%d requests, want none", n)
			}
		})
	})
	t.Run("next retry would pass the window", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{ReplayWindow: time.Minute, RetryBase: 2 * time.Minute},
				fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 500}).on(p)
			h.enqueue(outbox.Intent{Key: "k:win", Payload: emailBody("ada@example.com")})
			h.expect(h.try("k:win", 1), "cancelled", false, "the attempt")
			if rec := h.get("k:win"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
				t.Fatalf("record %+v", rec)
			}
			if got := fmt.Sprint(h.results()); got != "[expired]" {
				t.Fatalf("outcomes %s", got)
			}
		})
	})
	t.Run("snooze would pass the window", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{ReplayWindow: time.Minute}, fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120"}).on(p)
			h.enqueue(outbox.Intent{Key: "k:snz", Payload: emailBody("ada@example.com")})
			h.expect(h.try("k:snz", 1), "cancelled", false, "the attempt")
			if rec := h.get("k:snz"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "replay window") {
				t.Fatalf("record %+v", rec)
			}
		})
	})
}

// TestCanceledIntentIsNotSent: an intent canceled is never sent. A job a
// worker fetched before the cancel (as a database upgraded from a release
// before the drain holds: outboxtest.GiveJobs) runs and sends nothing; the
// drain never claims a canceled intent.
func TestCanceledIntentIsNotSent(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		rec := h.enqueue(outbox.Intent{Key: "k:cancel", Payload: emailBody("ada@example.com")})
		if p.perJob {
			// A worker fetched the job before the cancel and has not
			// claimed the intent yet. Cancel cannot finalize a running job
			// (River leaves that to the job's client), so the job goes on
			// to run.
			pgtest.Exec(t, h.pool, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, *rec.JobID)
		}
		if _, err := h.ob.Cancel(context.Background(), "k:cancel"); err != nil {
			t.Fatal(err)
		}
		want := "unclaimed"
		if p.perJob {
			want = "completed"
		}
		h.expect(h.try("k:cancel", 1), want, false, "after the cancel")
		if n := len(h.fake.Requests()); n != 0 {
			t.Fatalf("%d requests for a canceled intent", n)
		}
	})
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
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		c, err := client.New(client.WithAPIKey(testKey), client.WithBaseURL("http://mail.example.com"))
		if err != nil {
			t.Fatal(err)
		}
		h.worker.client = c
		h.enqueue(outbox.Intent{Key: "k:insecure", Payload: emailBody("ada@example.com")})
		h.expect(h.try("k:insecure", 1), "cancelled", false, "no retry can fix the base URL")
		if rec := h.get("k:insecure"); rec.State != outbox.StateFailed || !strings.Contains(rec.LastError, "plain http") {
			t.Fatalf("record %+v", rec)
		}
	})
}

// A 429 never parks an intent, however often it comes: rate limits wait
// (issue 12), bounded only by the replay window.
func TestRateLimitNeverParks(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{MaxSnoozes: 2}, fakeapi.Fault{Kind: fakeapi.FaultRateLimit}).on(p)
		h.enqueue(outbox.Intent{Key: "k:429", Payload: emailBody("ada@example.com")})
		for i := range 5 {
			h.expect(h.try("k:429", 1), "snoozed", false, fmt.Sprintf("429 number %d", i+1))
		}
		if rec := h.get("k:429"); rec.State != outbox.StatePending || rec.Snoozes != 0 {
			t.Fatalf("after five 429s: %+v, want pending with no snooze counted", rec)
		}
		h.fake.SetFaults()
		h.expect(h.try("k:429", 1), "completed", false, "after the limit lifted")
	})
}
