package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/sendjob"
	"github.com/sendonce/sendonce/internal/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// freeze enqueues an email intent per address and freezes them into one
// batch, as a coalescing worker does; it returns the batch's key and the
// members' keys in order. h.ownJobs keeps each member's own job.
func (h *harness) freeze(prefix string, to ...string) (string, []string) {
	h.t.Helper()
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
	h := newHarness(t, SendConfig{})
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
	h := newHarness(t, SendConfig{})
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
	h := newHarness(t, SendConfig{MaxAttempts: 1})
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
	h := newHarness(t, SendConfig{})
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
