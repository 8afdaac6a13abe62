package worker

import (
	"context"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// TestSplitOfACanceledRun: the whole-system test found (seed 1015) a
// member of a cancelled run delivered although CancelRun answered before
// the member's first attempt. Its batch had been claimed, and the API
// refused it whole with a 400 (certainly not sent); the cancel, finding
// the batch in flight, left its members; the split then gave each a job of
// its own, which sent it. A split's members are as unsent as before their
// batch, so a split of a cancelled run's batch cancels them, and a cancel
// after the split cancels them too. The members have jobs of their own,
// which froze them, as in a database upgraded from a release before the
// drain (enqueueRun: outboxtest.GiveJobs).
func TestSplitOfACanceledRun(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"cancel-then-split", "split-then-cancel"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHarness(t, SendConfig{}).on(ownJob)
			const run = "digest:w48"
			reqs := h.enqueueRun(run, "digest", "ada@example.com", "bo@example.com", "cy@example.com")
			var keys []string
			for _, r := range reqs {
				keys = append(keys, r.Key)
			}
			bt := &sendstate.Batcher{Pool: h.pool, River: h.river}
			batchKey, joined, err := bt.Freeze(ctx, outbox.DefaultQueue, run, reqs)
			if err != nil || len(joined) != len(reqs) {
				t.Fatalf("freeze: %d joined, %v", len(joined), err)
			}
			var jobID int64
			if err := h.pool.QueryRow(ctx, `SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1`, batchKey).Scan(&jobID); err != nil {
				t.Fatal(err)
			}
			// The batch's attempt: claimed, then refused whole with a 400.
			if _, ok, err := sendstate.ClaimBatch(ctx, h.pool, sendstate.ClaimRequest{Key: batchKey, JobID: jobID},
				sendstate.BatchClaimOptions{ClaimOptions: sendstate.ClaimOptions{ReplayWindow: time.Hour}}); err != nil || !ok {
				t.Fatalf("claim: %v, %v", ok, err)
			}
			refusal := sendstate.Outcome{Key: batchKey, JobID: jobID, Reason: "400 invalid_request_error/invalid: no"}
			split := func() {
				if _, _, err := bt.Split(ctx, refusal, []sendstate.SplitPart{{Members: keys[:1]}, {Members: keys[1:]}}); err != nil {
					t.Fatal(err)
				}
			}
			var res *outbox.RunCancel
			if order == "cancel-then-split" {
				if res, err = h.ob.CancelRun(ctx, run); err != nil {
					t.Fatal(err)
				}
				split()
			} else {
				split()
				if res, err = h.ob.CancelRun(ctx, run); err != nil {
					t.Fatal(err)
				}
			}
			h.sendLeft(keys, 5)
			if n := len(h.fake.Deliveries()); n != 0 {
				t.Errorf("%d deliveries of a cancelled run's members, want none", n)
			}
			for _, k := range keys {
				if rec := h.get(k); rec.State != outbox.StateCanceled {
					t.Errorf("%s: %s (%q), want canceled", k, rec.State, rec.LastError)
				}
			}
			st, err := h.ob.RunStatus(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			if st.Counts[outbox.StateCanceled] != 3 || st.Total != 3 {
				t.Errorf("run counts %v of %d, want 3 canceled (CancelRun answered canceled=%d left=%d)", st.Counts, st.Total, res.Canceled, res.Left)
			}
		})
	}
}
