package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func members(prefix string, n int) []outbox.Intent {
	out := make([]outbox.Intent, n)
	for i := range out {
		out[i] = outbox.Intent{Key: fmt.Sprintf("%s:%d", prefix, i),
			Payload: fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}`, i)}
	}
	return out
}

func enqueueRun(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, run outbox.Run) (*outbox.RunResult, error) {
	t.Helper()
	var res *outbox.RunResult
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		res, err = ob.EnqueueRun(context.Background(), tx, run)
		return err
	})
	return res, err
}

// TestEnqueueRunIsIdempotentAsAWhole: a run enqueued twice (a producer that
// crashed and ran again) is there once, with each member once; its members
// are held until the run's time, and then go at the bulk priority: the
// drain claims lone intents before them.
func TestEnqueueRunIsIdempotentAsAWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	run := outbox.Run{Key: "billing:2026-12", SendAt: at, Intents: members("invoice:2026-12", 5)}
	res, err := enqueueRun(t, pool, ob, run)
	if err != nil || !res.Created || len(res.Intents) != 5 || res.Intents[0].Existing {
		t.Fatalf("first EnqueueRun = %+v, %v; want a new run of 5", res, err)
	}
	run.Intents = append(run.Intents, members("invoice:2026-12", 7)[5:]...)
	res, err = enqueueRun(t, pool, ob, run)
	if err != nil || res.Created {
		t.Fatalf("second EnqueueRun = %+v, %v; want the existing run", res, err)
	}
	existing := 0
	for _, r := range res.Intents {
		if r.Existing {
			existing++
		}
	}
	if existing != 5 {
		t.Fatalf("second EnqueueRun: %d members existing, want 5 (and 2 new)", existing)
	}
	st, err := ob.RunStatus(ctx, "billing:2026-12")
	if err != nil || st.Total != 7 || st.Counts[outbox.StatePending] != 7 || st.State != outbox.RunActive || st.SendAt == nil || !st.SendAt.Equal(at) {
		t.Fatalf("RunStatus = %+v, %v; want 7 pending members, active, send at %s", st, err, at)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE run_key = 'billing:2026-12' AND send_at = $1 AND job_id IS NULL AND checked AND queue = $2`, at, outbox.DefaultQueue); n != 7 {
		t.Fatalf("%d members held until the run's time, naming the run, on the drain of %s; want 7", n, outbox.DefaultQueue)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs, want none", n)
	}
	if got := drainKeys(t, pool, ""); len(got) != 0 {
		t.Fatalf("the drain would claim %v before the run's time, want nothing", got)
	}
	// The run's time comes (as the hour passing would leave the members);
	// a lone intent enqueued then, due later than they are, is still
	// claimed first.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET send_at = now() - interval '1 minute' WHERE run_key = 'billing:2026-12'`)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "receipt:1", Payload: invoiceBody}); err != nil {
		t.Fatal(err)
	}
	want := []string{"receipt:1"}
	for _, m := range members("invoice:2026-12", 7) {
		want = append(want, m.Key)
	}
	if got := drainKeys(t, pool, ""); !slices.Equal(got, want) {
		t.Fatalf("the drain would claim %v, want the lone intent, then the members: %v", got, want)
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "bad key!"}); err == nil {
		t.Fatal("EnqueueRun with a bad key succeeded")
	}
}

// TestPauseResumeCancelRun drives a run's states: a paused run's members
// are not claimed, and are after resume; cancel takes every member not yet
// attempted, leaves the others and counts them; a canceled run takes no new
// member.
func TestPauseResumeCancelRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:1", Intents: members("campaign:1", 6)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.ResumeRun(ctx, "campaign:1"); !errors.As(err, new(*outbox.RunStateError)) {
		t.Fatalf("resume of an active run = %v, want a RunStateError", err)
	}
	st, err := ob.PauseRun(ctx, "campaign:1")
	if err != nil || st.State != outbox.RunPaused {
		t.Fatalf("PauseRun = %+v, %v", st, err)
	}
	// The drain claims none of its members meanwhile, but an intent of no
	// run.
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "lone:1", Payload: invoiceBody}); err != nil {
		t.Fatal(err)
	}
	if got := drainKeys(t, pool, ""); !slices.Equal(got, []string{"lone:1"}) {
		t.Fatalf("the drain would claim %v while the run is paused, want lone:1 only", got)
	}
	if st, err = ob.ResumeRun(ctx, "campaign:1"); err != nil || st.State != outbox.RunActive {
		t.Fatalf("ResumeRun = %+v, %v", st, err)
	}
	want := []string{"lone:1"}
	for _, m := range members("campaign:1", 6) {
		want = append(want, m.Key)
	}
	if got := drainKeys(t, pool, ""); !slices.Equal(got, want) {
		t.Fatalf("the drain would claim %v after resume, want %v", got, want)
	}
	// Two members were attempted (one sent, one sending) before the cancel.
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, delivery_status = 'bounced' WHERE idempotency_key = 'campaign:1:1';
		UPDATE sendonce_outbox SET state = 'sending', attempts = 1 WHERE idempotency_key = 'campaign:1:2'`); err != nil {
		t.Fatal(err)
	}
	res, err := ob.CancelRun(ctx, "campaign:1")
	if err != nil || res.Canceled != 4 || res.Left != 2 || res.Status.State != outbox.RunCanceled {
		t.Fatalf("CancelRun = %+v, %v; want 4 canceled, 2 left", res, err)
	}
	if d := res.Status.Deliveries; d[outbox.DeliveryBounced] != 1 || len(d) != 1 {
		t.Fatalf("run deliveries %v, want one bounced", d)
	}
	if rec := outboxtest.Get(t, ob, "campaign:1:2"); rec.State != outbox.StateSending {
		t.Fatalf("an attempted member became %s, want left sending", rec.State)
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:1", Intents: members("campaign:1", 7)}); !errors.Is(err, outbox.ErrRunCanceled) {
		t.Fatalf("a new member into a canceled run: %v, want ErrRunCanceled", err)
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:1", Intents: members("campaign:1", 6)}); err != nil {
		t.Fatalf("the same members again into a canceled run: %v, want them existing", err)
	}
	if _, err := ob.PauseRun(ctx, "campaign:1"); !errors.Is(err, outbox.ErrRunCanceled) {
		t.Fatalf("pause of a canceled run = %v, want ErrRunCanceled", err)
	}
	if _, err := ob.RunStatus(ctx, "nope"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("RunStatus of no run = %v, want ErrNotFound", err)
	}
}

// TestResumeRunGivesEndedJobsToTheDrain: in a database upgraded from a
// release before the drain, whose run members have River jobs of their own
// (outboxtest.GiveJobs), resume hands a member whose job ended while the
// run was paused to the drain, which claims it; the members whose jobs are
// still to run keep them, and no new job is written.
func TestResumeRunGivesEndedJobsToTheDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:1", Intents: members("campaign:1", 6)}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range members("campaign:1", 6) {
		keys = append(keys, m.Key)
	}
	outboxtest.GiveJobs(t, pool, keys...)
	if _, err := ob.PauseRun(ctx, "campaign:1"); err != nil {
		t.Fatal(err)
	}
	// A member's job ran while paused and ended without sending.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = 'campaign:1:0')`); err != nil {
		t.Fatal(err)
	}
	jobs := riverJobs(t, pool)
	if st, err := ob.ResumeRun(ctx, "campaign:1"); err != nil || st.State != outbox.RunActive {
		t.Fatalf("ResumeRun = %+v, %v", st, err)
	}
	if rec := outboxtest.Get(t, ob, "campaign:1:0"); rec.JobID != nil {
		t.Fatalf("after resume the member names job %d, want none: its job ended, and the drain sends it", *rec.JobID)
	}
	if got := drainKeys(t, pool, ""); len(got) != 1 || got[0] != "campaign:1:0" {
		t.Fatalf("the drain would claim %v after resume, want the member whose job ended", got)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM river_job j JOIN sendonce_outbox o ON o.job_id = j.id
		WHERE o.run_key = 'campaign:1' AND j.state = 'available'`); n != 5 {
		t.Fatalf("%d members with a job to work after resume, want the 5 whose jobs are still to run", n)
	}
	if after := riverJobs(t, pool); after != jobs {
		t.Fatalf("%d River jobs after resume, %d before: want no new job", after, jobs)
	}
}

// TestRescheduleRun holds the members not yet attempted until the new
// time: the drain claims none of them before it, and claims them once it
// has come.
func TestRescheduleRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "digest:w49", Intents: members("digest:w49", 3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1 WHERE idempotency_key = 'digest:w49:0'`); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	n, err := ob.RescheduleRun(ctx, "digest:w49", at)
	if err != nil || n != 2 {
		t.Fatalf("RescheduleRun = %d, %v; want 2", n, err)
	}
	if got := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE run_key = 'digest:w49' AND state = 'pending' AND send_at = $1 AND job_id IS NULL`, at); got != 2 {
		t.Fatalf("%d members held until %s, want 2", got, at)
	}
	if got := drainKeys(t, pool, ""); len(got) != 0 {
		t.Fatalf("the drain would claim %v before the run's new time, want nothing", got)
	}
	// Rescheduled to a time in the past: refused, nothing moved (a
	// mistyped date must not release a run at once).
	past := time.Date(2025, 12, 8, 9, 0, 0, 0, time.UTC)
	_, err = ob.RescheduleRun(ctx, "digest:w49", past)
	var inv *outbox.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "2025-12-08T09:00:00Z is in the past") {
		t.Fatalf("RescheduleRun to the past = %v; want an InvalidError saying the time is in the past", err)
	}
	if got := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE run_key = 'digest:w49' AND state = 'pending' AND send_at = $1`, at); got != 2 {
		t.Fatalf("%d members still held until %s after the refused reschedule, want 2", got, at)
	}
	// Rescheduled to now (a caller's now, a little behind the database's
	// clock): the drain claims them.
	if n, err = ob.RescheduleRun(ctx, "digest:w49", time.Now().Add(-time.Second)); err != nil || n != 2 {
		t.Fatalf("RescheduleRun to now = %d, %v; want 2", n, err)
	}
	if got := drainKeys(t, pool, ""); !slices.Equal(got, []string{"digest:w49:1", "digest:w49:2"}) {
		t.Fatalf("the drain would claim %v once the run's time has come, want the 2 members not yet sent", got)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs after the reschedules, want none", n)
	}
}

// TestRescheduleRunGivesJobsToTheDrain: in a database upgraded from a
// release before the drain, whose run members have River jobs of their own
// (outboxtest.GiveJobs), each member not yet attempted is held on its row
// until the new time and handed to the drain (its old job no longer names
// it, so it ends without sending); the member sent keeps its job.
func TestRescheduleRunGivesJobsToTheDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "digest:w49", Intents: members("digest:w49", 3)}); err != nil {
		t.Fatal(err)
	}
	outboxtest.GiveJobs(t, pool, "digest:w49:0", "digest:w49:1", "digest:w49:2")
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1 WHERE idempotency_key = 'digest:w49:0'`); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	n, err := ob.RescheduleRun(ctx, "digest:w49", at)
	if err != nil || n != 2 {
		t.Fatalf("RescheduleRun = %d, %v; want 2", n, err)
	}
	if got := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox
		WHERE run_key = 'digest:w49' AND state = 'pending' AND send_at = $1 AND job_id IS NULL`, at); got != 2 {
		t.Fatalf("%d members held on their rows until %s for the drain, want 2", got, at)
	}
	if got := drainKeys(t, pool, ""); len(got) != 0 {
		t.Fatalf("the drain would claim %v before the run's new time, want nothing", got)
	}
	if n, err = ob.RescheduleRun(ctx, "digest:w49", time.Now()); err != nil || n != 2 {
		t.Fatalf("RescheduleRun to now = %d, %v; want 2", n, err)
	}
	if got := drainKeys(t, pool, ""); len(got) != 2 {
		t.Fatalf("the drain would claim %v once the run's time has come, want the 2 unsent members", got)
	}
}

// TestSettledRun: a run whose members are all settled reads done (every
// reader shows RunStatus.State), and a cancel of it is refused, with the
// run left as it was: all 40 were sent, and "canceled" would say
// otherwise. A paused run all settled stays paused, and its cancel is
// refused too. A new member makes a done run active again, and a cancel
// then goes through. A run with no members yet is active, and cancelable.
func TestSettledRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for _, k := range []string{"billing:done", "billing:paused"} {
		if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: k, Intents: members(k, 40)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "billing:empty"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.PauseRun(ctx, "billing:paused"); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, sent_at = now(), message_id = 'msg_' || id
		WHERE run_key IN ('billing:done', 'billing:paused')`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'failed', last_error = '422' WHERE idempotency_key = 'billing:done:7'`)

	st, err := ob.RunStatus(ctx, "billing:done")
	if err != nil || st.State != outbox.RunDone || !st.Settled() {
		t.Fatalf("RunStatus of a run all settled = %+v, %v; want done", st, err)
	}
	runs, err := ob.Runs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]outbox.RunState{}
	for _, r := range runs {
		states[r.Key] = r.State
	}
	if want := map[string]outbox.RunState{"billing:done": outbox.RunDone, "billing:paused": outbox.RunPaused, "billing:empty": outbox.RunActive}; !maps.Equal(states, want) {
		t.Fatalf("Runs states %v, want %v", states, want)
	}

	_, err = ob.CancelRun(ctx, "billing:done")
	var rse *outbox.RunStateError
	if !errors.As(err, &rse) || rse.State != outbox.RunDone ||
		!strings.Contains(err.Error(), `cannot cancel run "billing:done": it is done: every one of its 40 members is settled (39 sent, 1 failed): nothing is left to cancel`) {
		t.Fatalf("CancelRun of a done run = %v; want a RunStateError: nothing is left to cancel", err)
	}
	_, err = ob.CancelRun(ctx, "billing:paused")
	if !errors.As(err, &rse) || !strings.Contains(err.Error(), "it is paused: every one of its 40 members is settled (40 sent)") {
		t.Fatalf("CancelRun of a paused run all settled = %v; want a RunStateError", err)
	}
	if got := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_run WHERE state = 'canceled'`); got != 0 {
		t.Fatalf("%d runs canceled after the refused cancels, want none", got)
	}

	// A member more: active again, and canceled with it.
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "billing:done", Intents: members("billing:done", 41)}); err != nil {
		t.Fatal(err)
	}
	if st, err = ob.RunStatus(ctx, "billing:done"); err != nil || st.State != outbox.RunActive {
		t.Fatalf("RunStatus after a new member = %+v, %v; want active", st, err)
	}
	if res, err := ob.CancelRun(ctx, "billing:done"); err != nil || res.Canceled != 1 || res.Status.State != outbox.RunCanceled {
		t.Fatalf("CancelRun with a member to send = %+v, %v; want 1 canceled", res, err)
	}
	if res, err := ob.CancelRun(ctx, "billing:empty"); err != nil || res.Canceled != 0 || res.Status.State != outbox.RunCanceled {
		t.Fatalf("CancelRun of a run with no members = %+v, %v; want canceled (it takes no members from now on)", res, err)
	}
}
