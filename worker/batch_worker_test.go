package worker

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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// freeze enqueues an email intent per address and freezes them into one
// batch, as a coalescing worker does; it returns the batch's key and the
// members' keys in order. h.ownJobs keeps each member's own job. The
// members have River jobs of their own, which freeze them, as in a
// database upgraded from a release before the drain (outboxtest.GiveJobs).
func (h *harness) freeze(prefix string, to ...string) (string, []string) {
	h.t.Helper()
	h.perJob = true
	var reqs []sendstate.ClaimRequest
	var keys []string
	for i, addr := range to {
		key := fmt.Sprintf("%s:%d", prefix, i)
		rec := h.enqueue(outbox.Intent{Key: key, Payload: emailBody(addr)})
		reqs = append(reqs, sendstate.ClaimRequest{Key: key, JobID: *rec.JobID})
		h.ownJobs[key] = *rec.JobID
		keys = append(keys, key)
	}
	b := &sendstate.Batcher{Pool: h.pool, River: h.river}
	batchKey, joined, err := b.Freeze(context.Background(), outbox.DefaultQueue, "", reqs)
	if err != nil || len(joined) != len(to) {
		h.t.Fatalf("freeze: %d joined, %v", len(joined), err)
	}
	return batchKey, keys
}

// workBatch runs the batch's River job as its attempt-th attempt.
func (h *harness) workBatch(batchKey string, attempt int) (*rivertest.WorkResult, error) {
	h.t.Helper()
	ctx := context.Background()
	var jobID int64
	if err := h.pool.QueryRow(ctx, `SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1`, batchKey).Scan(&jobID); err != nil {
		h.t.Fatal(err)
	}
	bw := &batchWorker{w: h.worker, batcher: &sendstate.Batcher{Pool: h.pool, River: h.river}}
	return workAs(h, jobID, attempt, river.Worker[sendjob.BatchArgs](bw))
}

func (h *harness) batchState(key string) string {
	h.t.Helper()
	state, _, err := sendstate.PeekBatch(context.Background(), h.pool, key)
	if err != nil {
		h.t.Fatal(err)
	}
	return state
}

// TestBatchCrashAfterAcceptReplaysWhole: a batch killed between "the API
// accepted it" and "recorded" is sent again as the same request under the
// same key, and the API replays it: each email delivered once.
func TestBatchCrashAfterAcceptReplaysWhole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	batchKey, members := h.freeze("invoice", "a@example.com", "b@example.com", "c@example.com")
	// The members' own jobs are superseded: they send nothing.
	if res, err := h.workJob(h.ownJobs[members[0]], 1); err != nil || !completed(res) || len(h.fake.Requests()) != 0 {
		t.Fatalf("member's own job: %s, %d requests; want completed, none", show(res, err), len(h.fake.Requests()))
	}

	crash := errors.New("worker killed")
	h.worker.afterSend = func(string) error { return crash }
	if res, err := h.workBatch(batchKey, 1); !errors.Is(err, crash) || !retried(res) {
		t.Fatalf("first run: %s, want the crash, retried", show(res, err))
	}
	for _, k := range members {
		if rec := h.get(k); rec.State != outbox.StateSending || rec.BatchKey != batchKey {
			t.Fatalf("after the crash %s: %+v, want sending in %s", k, rec, batchKey)
		}
	}
	h.worker.afterSend = nil
	if res, err := h.workBatch(batchKey, 2); err != nil || !completed(res) {
		t.Fatalf("rerun: %s, want completed", show(res, err))
	}

	reqs := h.fake.Requests()
	if len(reqs) != 2 || reqs[0].IdempotencyKey != batchKey || reqs[1].IdempotencyKey != batchKey || !reqs[1].Replayed ||
		reqs[0].Path != "/emails/batch" || reqs[1].Path != "/emails/batch" {
		t.Fatalf("requests %+v, want the batch twice under %s, the second replayed", reqs, batchKey)
	}
	d := h.fake.Deliveries()
	if len(d) != 3 {
		t.Fatalf("%d deliveries, want 3", len(d))
	}
	for i, k := range members {
		rec := h.get(k)
		if rec.State != outbox.StateSent || !rec.Replayed || rec.MessageID != d[i].MessageID || !rec.Uncertain && rec.Attempts != 2 {
			t.Errorf("%s: %+v, want sent, replayed, message %s", k, rec, d[i].MessageID)
		}
	}
	if st := h.batchState(batchKey); st != "sent" {
		t.Errorf("batch %s, want sent", st)
	}
}

// TestBatchInvalidMemberIsSplitOut: the API refuses a batch whole because
// of one email; that email is failed with the reason and the others go on
// in a new batch of their own.
func TestBatchInvalidMemberIsSplitOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	to := make([]string, 100)
	for i := range to {
		to[i] = fmt.Sprintf("c%d@example.com", i)
	}
	// An address form the outbox takes and the API refuses: a display
	// name encoded in a charset its parser does not decode.
	to[37] = "=?koi8-r?q?C37?= <c37@example.com>"
	batchKey, members := h.freeze("invoice", to...)
	if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
		t.Fatalf("batch: %s, want completed (split)", show(res, err))
	}
	if st := h.batchState(batchKey); st != "split" {
		t.Fatalf("batch %s, want split", st)
	}
	bad := h.get(members[37])
	if bad.State != outbox.StateFailed || bad.Uncertain || !strings.Contains(bad.LastError, "emails[37].to") {
		t.Fatalf("bad member: %+v, want failed, certain, naming emails[37].to", bad)
	}
	next := h.get(members[0]).BatchKey
	if next == batchKey || next == "" {
		t.Fatalf("the others are bound to %q, want a new batch", next)
	}
	if res, err := h.workBatch(next, 1); err != nil || !completed(res) {
		t.Fatalf("new batch: %s, want completed", show(res, err))
	}
	for i, k := range members {
		if i != 37 && h.get(k).State != outbox.StateSent {
			t.Fatalf("%s: %+v, want sent", k, h.get(k))
		}
	}
	if n := len(h.fake.Deliveries()); n != 99 {
		t.Fatalf("%d deliveries, want 99", n)
	}
}

// TestBatchRetriedWhole: an operator's retry of a member of a batch that
// failed with an unknown outcome sends the whole batch again under its key.
func TestBatchRetriedWhole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{MaxAttempts: 1}).on(ownJob)
	batchKey, members := h.freeze("invoice", "a@example.com", "b@example.com")
	if err := h.fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 503}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.workBatch(batchKey, 1); err != nil || !cancelled(res) {
		t.Fatalf("batch: %s, want parked", show(res, err))
	}
	for _, k := range members {
		if rec := h.get(k); rec.State != outbox.StateFailed || !rec.Uncertain {
			t.Fatalf("%s: %+v, want failed, uncertain", k, rec)
		}
	}
	if _, err := h.ob.Cancel(context.Background(), members[0]); err == nil {
		t.Fatal("cancel of a failed batch member succeeded")
	}
	h.fake.SetFaults()
	rec, err := h.ob.Retry(context.Background(), members[1], nil)
	if err != nil || rec.State != outbox.StatePending || rec.BatchKey != batchKey {
		t.Fatalf("Retry = %+v, %v; want pending, still in %s", rec, err, batchKey)
	}
	if h.get(members[0]).State != outbox.StatePending {
		t.Fatalf("the other member: %+v, want pending with its batch", h.get(members[0]))
	}
	if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
		t.Fatalf("retried batch: %s, want completed", show(res, err))
	}
	reqs := h.fake.Requests()
	if len(reqs) < 2 || !reqs[len(reqs)-1].Replayed || reqs[len(reqs)-1].IdempotencyKey != batchKey {
		t.Fatalf("last request %+v, want a replay under %s", reqs[len(reqs)-1], batchKey)
	}
	for _, k := range members {
		if rec := h.get(k); rec.State != outbox.StateSent || !rec.Replayed {
			t.Fatalf("%s: %+v, want sent, replayed", k, rec)
		}
	}
	if n := len(h.fake.Deliveries()); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
}

// TestFrozenMemberCannotBeCanceled: a frozen batch's request never
// changes, so its members cannot be canceled out of it.
func TestFrozenMemberCannotBeCanceled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	batchKey, members := h.freeze("invoice", "a@example.com", "b@example.com")
	_, err := h.ob.Cancel(context.Background(), members[0])
	var se *outbox.StateError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), batchKey) {
		t.Fatalf("Cancel = %v, want a StateError naming the batch", err)
	}
}

func TestSplitParts(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e"}
	named := &client.APIError{Status: 422, Code: "validation_error", Param: "emails[3].to", Message: "bad"}
	parts := splitParts(members, named)
	if len(parts) != 2 || !slices.Equal(parts[0].Members, []string{"d"}) || parts[0].Failed == "" ||
		!slices.Equal(parts[1].Members, []string{"a", "b", "c", "e"}) {
		t.Errorf("named: %+v, want d failed alone and the rest together", parts)
	}
	unnamed := &client.APIError{Status: 400, Code: "invalid_request", Message: "bad"}
	parts = splitParts(members, unnamed)
	if len(parts) != 2 || !slices.Equal(parts[0].Members, []string{"a", "b"}) || !slices.Equal(parts[1].Members, []string{"c", "d", "e"}) {
		t.Errorf("unnamed: %+v, want halves", parts)
	}
	for _, err := range []error{
		&client.APIError{Status: 401, Code: "unauthorized"},
		&client.APIError{Status: 409, Code: "conflict"},
		&client.APIError{Status: 422, Code: "idempotency_key_reuse"},
		&client.APIError{Status: 503},
		errors.New("network"),
	} {
		if p := splitParts(members, err); p != nil {
			t.Errorf("%v: split %+v, want none", err, p)
		}
	}
	if p := splitParts([]string{"a"}, named); p != nil {
		t.Errorf("one member: split %+v, want none", p)
	}
}

// sendLeft works every job the members' rows name while any member is still
// to send (a new batch after a split, or a member's job of its own after
// one), at most rounds times: what a running worker would go on to send.
func (h *harness) sendLeft(members []string, rounds int) {
	h.t.Helper()
	for range rounds {
		worked := map[string]bool{}
		for _, k := range members {
			rec := h.get(k)
			if rec.State != outbox.StatePending && rec.State != outbox.StateSending {
				continue
			}
			switch {
			case rec.BatchKey != "" && !worked[rec.BatchKey]:
				worked[rec.BatchKey] = true
				h.workBatch(rec.BatchKey, 1) //nolint:errcheck // the ledger and the rows tell the outcome
			case rec.BatchKey == "" && rec.JobID != nil:
				h.workJob(*rec.JobID, 1) //nolint:errcheck // as above
			}
		}
		if len(worked) == 0 {
			return
		}
	}
}

// TestUncertainBatchIsNeverSplit: attempt 1 of a batch is delivered and
// its answer lost; attempt 2 is refused whole with 400 or 422 (a proxy in
// between, a validation rule changed). The API may hold the first
// delivery, so the batch is not split into new keys (each member would go
// out a second time): it is parked failed and uncertain, as a single send
// is, and each member was delivered exactly once.
func TestUncertainBatchIsNeverSplit(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, SendConfig{}).on(ownJob)
			to := []string{"ada@example.com", "bo@example.com", "cy@example.com"}
			batchKey, members := h.freeze("invoice", to...)

			// Attempt 1: delivered, every answer lost (the client's own
			// retries are replays, and lost too).
			if err := h.fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 503}); err != nil {
				t.Fatal(err)
			}
			if res, err := h.workBatch(batchKey, 1); err == nil || !retried(res) {
				t.Fatalf("attempt 1: %s, want retried", show(res, err))
			}
			if n := len(h.fake.Deliveries()); n != 3 {
				t.Fatalf("after attempt 1: %d deliveries, want 3", n)
			}
			// Attempt 2: refused whole before the API looks at the key.
			if err := h.fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: status}); err != nil {
				t.Fatal(err)
			}
			res, err := h.workBatch(batchKey, 2)
			h.fake.SetFaults() //nolint:errcheck // no rules: always accepted
			h.sendLeft(members, 5)
			h.checkParkedUnsplit(batchKey, to, members, res, err)
			for _, k := range members {
				if rec := h.get(k); !strings.Contains(rec.LastError, fmt.Sprint(status)) {
					t.Errorf("%s: last error %q, want it naming %d", k, rec.LastError, status)
				}
			}
		})
	}
}

// TestSplitRefusesUncertainBatch: Split itself never splits a batch an
// earlier attempt of which may have reached the API, whoever calls it.
func TestSplitRefusesUncertainBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	batchKey, members := h.freeze("invoice", "ada@example.com", "bo@example.com")
	ctx := context.Background()
	var jobID int64
	if err := h.pool.QueryRow(ctx, `UPDATE sendonce_batch SET uncertain = true, state = 'sending'
		WHERE idempotency_key = $1 RETURNING job_id`, batchKey).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	b := &sendstate.Batcher{Pool: h.pool, River: h.river}
	_, _, err := b.Split(ctx, sendstate.Outcome{Key: batchKey, JobID: jobID, Reason: "422"},
		[]sendstate.SplitPart{{Members: members[:1]}, {Members: members[1:]}})
	if !errors.Is(err, sendstate.ErrSplitUncertain) {
		t.Fatalf("Split = %v, want ErrSplitUncertain", err)
	}
	if st := h.batchState(batchKey); st != "sending" {
		t.Fatalf("batch %s, want sending (unchanged)", st)
	}
	for _, k := range members {
		if rec := h.get(k); rec.BatchKey != batchKey {
			t.Fatalf("%s bound to %q, want %s", k, rec.BatchKey, batchKey)
		}
	}
}

// bounce puts addresses on the suppression list as a bounce webhook does.
func (h *harness) bounce(addrs ...string) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO sendonce_suppression (address, reason, source)
		SELECT a, 'bounced', 'webhook test' FROM unnest($1::text[]) a`, addrs); err != nil {
		h.t.Fatal(err)
	}
}

// TestFrozenBatchHonoursLaterSuppression: a bounce suppresses bo after
// (ada, bo, cy) were frozen into a batch. The batch's first claim looks the
// list up as a single send's first claim does: bo is parked suppressed,
// with a single send's reason, and never mailed; the others go in the
// batch. The lookup is made once and stored: a change to the list after
// the first claim does not change the body, so a replay still works.
func TestFrozenBatchHonoursLaterSuppression(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	batchKey, members := h.freeze("digest", "ada@example.com", "bo@example.com", "cy@example.com")
	h.bounce("bo@example.com")

	crash := errors.New("worker killed")
	h.worker.afterSend = func(string) error { return crash }
	if res, err := h.workBatch(batchKey, 1); !errors.Is(err, crash) || !retried(res) {
		t.Fatalf("attempt 1: %s, want the crash, retried", show(res, err))
	}
	h.worker.afterSend = nil
	// After the first claim: bo taken off the list, cy put on it. The
	// batch's body under its key stays as the first claim made it.
	if _, err := h.ob.Unsuppress(context.Background(), []string{"bo@example.com"}); err != nil {
		t.Fatal(err)
	}
	h.bounce("cy@example.com")
	if res, err := h.workBatch(batchKey, 2); err != nil || !completed(res) {
		t.Errorf("attempt 2: %s, want completed", show(res, err))
	}

	if d := h.fake.DeliveriesTo("bo@example.com"); len(d) != 0 {
		t.Errorf("bo@example.com, suppressed before the batch's first claim, was mailed %d times", len(d))
	}
	for _, addr := range []string{"ada@example.com", "cy@example.com"} {
		if n := len(h.fake.DeliveriesTo(addr)); n != 1 {
			t.Errorf("%s delivered %d times, want 1", addr, n)
		}
	}
	reqs := h.fake.Requests()
	if len(reqs) != 2 || reqs[1].IdempotencyKey != batchKey || !reqs[1].Replayed {
		t.Errorf("requests %+v, want the batch twice under %s, the second replayed", reqs, batchKey)
	}
	bo := h.get(members[1])
	if want := "not sent: every recipient is on the suppression list: bo@example.com (bounced)"; bo.State != outbox.StateSuppressed ||
		bo.LastError != want || bo.Attempts != 0 || bo.FirstAttemptAt != nil || bo.Uncertain || bo.BatchKey != "" {
		t.Errorf("bo: state %s, last error %q, attempts %d, batch %q; want suppressed, %q, no attempt, in no batch",
			bo.State, bo.LastError, bo.Attempts, bo.BatchKey, want)
	}
	for _, k := range []string{members[0], members[2]} {
		if rec := h.get(k); rec.State != outbox.StateSent || rec.BatchKey != batchKey {
			t.Errorf("%s: %s in %q, want sent in %s", k, rec.State, rec.BatchKey, batchKey)
		}
	}
	if st := h.batchState(batchKey); st != "sent" {
		t.Errorf("batch %s, want sent", st)
	}
	if got := fmt.Sprint(h.results()); !strings.Contains(got, "suppressed") {
		t.Errorf("outcomes %s, want one suppressed", got)
	}
}

// TestFrozenBatchPartlySuppressed: a member some of whose recipients were
// suppressed after the freeze follows --partly-suppressed as a single send
// does: sent to the others within the batch, or parked.
func TestFrozenBatchPartlySuppressed(t *testing.T) {
	t.Parallel()
	body := json.RawMessage(`{"from":"billing@example.com","to":["ada@example.com","bo@example.com"],` +
		`"cc":["dee@example.com"],"subject":"Invoice","text":"Attached."}`)
	freeze := func(h *harness) (string, []string) {
		var reqs []sendstate.ClaimRequest
		keys := []string{"part:0", "part:1"}
		for i, p := range []json.RawMessage{body, emailBody("cy@example.com")} {
			rec := h.enqueue(outbox.Intent{Key: keys[i], Payload: p})
			reqs = append(reqs, sendstate.ClaimRequest{Key: keys[i], JobID: *rec.JobID})
		}
		b := &sendstate.Batcher{Pool: h.pool, River: h.river}
		batchKey, joined, err := b.Freeze(context.Background(), outbox.DefaultQueue, "", reqs)
		if err != nil || len(joined) != 2 {
			t.Fatalf("freeze: %d joined, %v", len(joined), err)
		}
		h.bounce("bo@example.com", "dee@example.com")
		return batchKey, keys
	}

	t.Run("send to the rest", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{}).on(ownJob)
		batchKey, keys := freeze(h)
		if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
			t.Fatalf("batch: %s, want completed", show(res, err))
		}
		rec := h.get(keys[0])
		d := h.fake.DeliveriesTo("ada@example.com")
		if rec.State != outbox.StateSent || len(d) != 1 || fmt.Sprint(d[0].To) != "[ada@example.com]" || len(d[0].Cc) != 0 {
			var sent []string
			for _, x := range d {
				sent = append(sent, fmt.Sprintf("to %v cc %v", x.To, x.Cc))
			}
			t.Errorf("part:0 %s, deliveries to ada %v; want sent to ada alone", rec.State, sent)
		}
		if fmt.Sprint(rec.SuppressedRecipients) != "[bo@example.com dee@example.com]" {
			t.Errorf("part:0 suppressed recipients %v", rec.SuppressedRecipients)
		}
		if n := len(h.fake.DeliveriesTo("bo@example.com")) + len(h.fake.DeliveriesTo("dee@example.com")); n != 0 {
			t.Errorf("%d deliveries to suppressed addresses", n)
		}
		if rec := h.get(keys[1]); rec.State != outbox.StateSent || len(h.fake.DeliveriesTo("cy@example.com")) != 1 {
			t.Errorf("part:1 %s, want sent once", rec.State)
		}
	})

	t.Run("park", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{PartlySuppressed: PartlySuppressedPark}).on(ownJob)
		batchKey, keys := freeze(h)
		if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
			t.Fatalf("batch: %s, want completed", show(res, err))
		}
		rec := h.get(keys[0])
		want := "not sent: some recipients are on the suppression list, and partly suppressed intents are parked: " +
			"bo@example.com (bounced), dee@example.com (bounced)"
		if rec.State != outbox.StateSuppressed || rec.LastError != want {
			t.Errorf("part:0 %s, %q; want suppressed, %q", rec.State, rec.LastError, want)
		}
		if n := len(h.fake.DeliveriesTo("ada@example.com")); n != 0 {
			t.Errorf("%d deliveries of the parked member", n)
		}
		if rec := h.get(keys[1]); rec.State != outbox.StateSent || len(h.fake.DeliveriesTo("cy@example.com")) != 1 {
			t.Errorf("part:1 %s, want sent once", rec.State)
		}
	})
}

// TestFrozenBatchAllSuppressed: when the first claim finds every member
// suppressed, nothing is sent: no request at all.
func TestFrozenBatchAllSuppressed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	batchKey, members := h.freeze("digest", "ada@example.com", "bo@example.com")
	h.bounce("ada@example.com", "bo@example.com")
	if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
		t.Fatalf("batch: %s, want completed", show(res, err))
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Errorf("%d API requests, want none", n)
	}
	for _, k := range members {
		if rec := h.get(k); rec.State != outbox.StateSuppressed || rec.BatchKey != "" {
			t.Errorf("%s: %s in %q, want suppressed in no batch", k, rec.State, rec.BatchKey)
		}
	}
	if st := h.batchState(batchKey); st == "pending" || st == "sending" {
		t.Errorf("batch %s, want settled", st)
	}
}

// enqueueRun enqueues an email intent per address as members of run and
// returns the claim requests of their jobs, in order.
func (h *harness) enqueueRun(run, prefix string, to ...string) []sendstate.ClaimRequest {
	h.t.Helper()
	intents := make([]outbox.Intent, len(to))
	for i, addr := range to {
		intents[i] = outbox.Intent{Key: fmt.Sprintf("%s:%d", prefix, i), Payload: emailBody(addr)}
	}
	var keys []string
	err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
		res, err := h.ob.EnqueueRun(context.Background(), tx, outbox.Run{Key: run, Intents: intents})
		if err != nil {
			return err
		}
		for _, r := range res.Intents {
			keys = append(keys, r.Record.Key)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	// Jobs of their own, as in a database upgraded from a release before
	// the drain.
	outboxtest.GiveJobs(h.t, h.pool, keys...)
	var reqs []sendstate.ClaimRequest
	for _, k := range keys {
		reqs = append(reqs, sendstate.ClaimRequest{Key: k, JobID: *h.get(k).JobID})
	}
	return reqs
}

// awaitLockWaits waits until n sessions of the test's database wait for a
// lock (a row lock another transaction holds), or until done is closed (the
// session ended without waiting). PostgreSQL tells of a lock wait only in
// pg_stat_activity, so it is polled.
func (h *harness) awaitLockWaits(n int, done <-chan struct{}) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			h.t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		select {
		case <-done:
			return
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d sessions wait for a lock after 30 s, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// whileWaiting runs f in a goroutine and returns once n sessions of the
// test's database wait for a lock (awaitLockWaits), or f has ended; the
// function it returns waits for f to end.
func (h *harness) whileWaiting(n int, f func()) (wait func()) {
	h.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	h.awaitLockWaits(n, done)
	return func() { <-done }
}

// checkRunCanceled checks what the members and batches of a canceled run
// became: every member canceled (res counts them), and no job sends one.
func (h *harness) checkRunCanceled(run string, res *outbox.RunCancel, keys []string) {
	h.t.Helper()
	if res.Canceled != int64(len(keys)) || res.Left != 0 {
		h.t.Errorf("CancelRun: canceled=%d left=%d, want canceled=%d left=0", res.Canceled, res.Left, len(keys))
	}
	for _, k := range keys {
		if rec := h.get(k); rec.State != outbox.StateCanceled {
			h.t.Errorf("%s: %s, want canceled", k, rec.State)
		}
	}
	rows, err := h.pool.Query(context.Background(), `SELECT idempotency_key FROM sendonce_batch WHERE run_key = $1`, run)
	if err != nil {
		h.t.Fatal(err)
	}
	batches, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	for _, bk := range batches {
		if st := h.batchState(bk); st == "pending" || st == "sending" {
			h.t.Errorf("batch %s of the canceled run is %s", bk, st)
		}
		h.workBatch(bk, 1) //nolint:errcheck // the ledger tells
	}
	for _, k := range keys {
		if rec := h.get(k); rec.JobID != nil {
			h.workJob(*rec.JobID, 1) //nolint:errcheck // as above
		}
	}
	if n := len(h.fake.Deliveries()); n != 0 {
		h.t.Errorf("%d deliveries of a canceled run's members, want none", n)
	}
	st, err := h.ob.RunStatus(context.Background(), run)
	if err != nil || st.Counts[outbox.StateCanceled] != int64(len(keys)) || st.Total != int64(len(keys)) {
		h.t.Errorf("RunStatus = %+v, %v; want all %d members canceled", st, err, len(keys))
	}
}

// TestFreezeRacingCancelRun: a batch frozen while its run is canceled.
// Freeze and CancelRun serialise on the run's row, so each sees the
// other's outcome: a batch frozen first is canceled whole with its members,
// and a cancel first leaves nothing to freeze. Each race is played with
// one transaction held open while the other runs.
func TestFreezeRacingCancelRun(t *testing.T) {
	t.Parallel()
	to := []string{"ada@example.com", "bo@example.com", "cy@example.com"}

	t.Run("freeze first", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{}).on(ownJob)
		ctx := context.Background()
		reqs := h.enqueueRun("digest:1", "digest:1", to...)
		tx, err := h.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		b := &sendstate.Batcher{Pool: h.pool, River: h.river}
		if _, joined, err := b.FreezeTx(ctx, tx, outbox.DefaultQueue, "digest:1", reqs); err != nil || len(joined) != 3 {
			t.Fatalf("freeze: %d joined, %v", len(joined), err)
		}
		// CancelRun runs while the freeze is not yet committed.
		var res *outbox.RunCancel
		var cancelErr error
		canceled := h.whileWaiting(1, func() { res, cancelErr = h.ob.CancelRun(ctx, "digest:1") })
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		canceled()
		if cancelErr != nil {
			t.Fatal(cancelErr)
		}
		h.checkRunCanceled("digest:1", res, keysOf(reqs))
	})

	t.Run("cancel first", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, SendConfig{}).on(ownJob)
		ctx := context.Background()
		b := &sendstate.Batcher{Pool: h.pool, River: h.river}
		// An earlier batch of the run, locked by a claim in progress:
		// CancelRun waits for it holding the run's lock, before it has
		// touched a member.
		early := h.enqueueRun("digest:2", "early", "dee@example.com", "eve@example.com")
		earlyKey, joined, err := b.Freeze(ctx, outbox.DefaultQueue, "digest:2", early)
		if err != nil || len(joined) != 2 {
			t.Fatalf("freeze the earlier batch: %d joined, %v", len(joined), err)
		}
		reqs := h.enqueueRun("digest:2", "digest:2", to...)
		claim, err := h.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer claim.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := claim.Exec(ctx, `SELECT 1 FROM sendonce_batch WHERE idempotency_key = $1 FOR UPDATE`, earlyKey); err != nil {
			t.Fatal(err)
		}
		var res *outbox.RunCancel
		var cancelErr error
		canceled := h.whileWaiting(1, func() { res, cancelErr = h.ob.CancelRun(ctx, "digest:2") })
		// The freeze runs while the cancel is not yet committed.
		var frozen []int64
		var freezeErr error
		froze := h.whileWaiting(2, func() { _, frozen, freezeErr = b.Freeze(ctx, outbox.DefaultQueue, "digest:2", reqs) })
		if err := claim.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		canceled()
		froze()
		if cancelErr != nil || freezeErr != nil {
			t.Fatalf("CancelRun: %v; Freeze: %v", cancelErr, freezeErr)
		}
		if len(frozen) != 0 {
			t.Errorf("Freeze after the run's cancel: %d joined, want none", len(frozen))
		}
		h.checkRunCanceled("digest:2", res, append(keysOf(early), keysOf(reqs)...))
	})
}

func keysOf(reqs []sendstate.ClaimRequest) []string {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	return keys
}
