package sendstate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// freezeTwo freezes m:1 and m:2 into a batch and returns its key and job.
// They have jobs of their own, whose requests Freeze takes, as in a
// database upgraded from a release before the drain.
func freezeTwo(t *testing.T) (*sendstate.Scheduler, string, int64) {
	t.Helper()
	pool, _, jobs := setupJobs(t, "m:1", "m:2")
	b := &sendstate.Batcher{Pool: pool, River: jobs.River}
	key, joined, err := b.Freeze(context.Background(), outbox.DefaultQueue, "",
		[]sendstate.ClaimRequest{request(t, pool, "m:1"), request(t, pool, "m:2")})
	if err != nil || len(joined) != 2 {
		t.Fatalf("Freeze = %q, %v, %v", key, joined, err)
	}
	jobID := outboxtest.Value[int64](t, pool, `SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1`, key)
	return jobs, key, jobID
}

func claimBatchAs(t *testing.T, jobs *sendstate.Scheduler, key string, jobID int64, l sendstate.Lease) *sendstate.Batch {
	t.Helper()
	opts := sendstate.BatchClaimOptions{ClaimOptions: claimOpts}
	opts.Owner = l.Epoch
	b, ok, err := sendstate.ClaimBatch(context.Background(), jobs.Pool, sendstate.ClaimRequest{Key: key, JobID: jobID}, opts)
	if err != nil || !ok {
		t.Fatalf("ClaimBatch under epoch %d: %v, %v", l.Epoch, ok, err)
	}
	return b
}

// overlap is a batch of m:1 and m:2 claimed twice under one worker's
// lease, first by its job's run and second by an overlapping run.
type overlap struct {
	pool          *pgxpool.Pool
	key           string
	jobID         int64
	lease         sendstate.Lease
	first, second *sendstate.Batch
}

func claimOverlapping(t *testing.T) overlap {
	t.Helper()
	jobs, key, jobID := freezeTwo(t)
	ov := overlap{pool: jobs.Pool, key: key, jobID: jobID, lease: takeLease(t, jobs.Pool, "worker0")}
	ov.first = claimBatchAs(t, jobs, key, jobID, ov.lease)
	ov.second = claimBatchAs(t, jobs, key, jobID, ov.lease) // the job's overlapping run
	return ov
}

// The flake of integration TestDBRestart/coalesce (seed 98304899): River
// ran a batch's job twice at once after the database restart (a completion
// that the outage delayed set the job available again while its next run
// was sending). Both runs claimed the batch under the same worker's lease;
// the first got the API's fresh answer, the second its replay. The first
// run's late record was taken, and the second run's record found the
// members sent and changed nothing: the batch the API replayed was
// recorded replayed=false. The later claim holds the batch: only its
// record counts, and the earlier run's, superseded, records nothing.
func TestOverlappingBatchRunsRecordTheLaterClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ov := claimOverlapping(t)
	pool, key, l, first, second := ov.pool, ov.key, ov.lease, ov.first, ov.second
	if !second.Uncertain || second.Attempts != first.Attempts+1 {
		t.Fatalf("second claim: attempts %d uncertain %v, want %d and uncertain", second.Attempts, second.Uncertain, first.Attempts+1)
	}

	fresh := []sendstate.Sent{{Key: "m:1", MessageID: "msg_1"}, {Key: "m:2", MessageID: "msg_2"}}
	if _, err := sendstate.RecordBatch(ctx, pool, key, l.Epoch, first.Attempts, fresh, nil); !errors.Is(err, sendstate.ErrSuperseded) {
		t.Errorf("the superseded run's record: %v, want ErrSuperseded", err)
	}
	replay := []sendstate.Sent{{Key: "m:1", MessageID: "msg_1", Replayed: true}, {Key: "m:2", MessageID: "msg_2", Replayed: true}}
	if _, err := sendstate.RecordBatch(ctx, pool, key, l.Epoch, second.Attempts, replay, nil); err != nil {
		t.Fatalf("the holding run's record: %v", err)
	}
	for _, k := range []string{"m:1", "m:2"} {
		if r := get(t, pool, k); r.State != outbox.StateSent || !r.Replayed || r.MessageID != "msg_"+k[2:] {
			t.Errorf("%s: state=%s replayed=%v message_id=%q; the API replayed its batch to the run holding it, want sent replayed=true",
				k, r.State, r.Replayed, r.MessageID)
		}
	}
}

// A superseded run's other outcomes change nothing either: its "try
// again" would put the batch back to pending (claimable by yet another run)
// while the later run sends it, and its failure would park it.
func TestSupersededBatchRunMarksNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ov := claimOverlapping(t)
	pool, key := ov.pool, ov.key

	o := sendstate.Outcome{Key: key, JobID: ov.jobID, Reason: "503", Uncertain: true, Owner: ov.lease.Epoch, Attempt: ov.first.Attempts}
	if err := sendstate.MarkBatchPending(ctx, pool, o); err != nil {
		t.Fatal(err)
	}
	if err := sendstate.MarkBatchFailed(ctx, pool, o); err != nil {
		t.Fatal(err)
	}
	if s := outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_batch WHERE idempotency_key = $1`, key); s != "sending" {
		t.Errorf("batch state %q after the superseded run's outcomes, want sending (the later run holds it)", s)
	}
	for _, k := range []string{"m:1", "m:2"} {
		if r := get(t, pool, k); r.State != outbox.StateSending {
			t.Errorf("%s: state=%s after the superseded run's outcomes, want sending", k, r.State)
		}
	}
}
