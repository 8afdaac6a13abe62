package sendstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// takeLease takes a lease as a worker instance does at its start.
func takeLease(t *testing.T, pool *pgxpool.Pool, name string) sendstate.Lease {
	t.Helper()
	l, err := sendstate.TakeLease(context.Background(), pool, sendstate.Lease{}, sendstate.Holder{Host: name, PID: 1}, sendstate.DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lapse moves the lease's end into the past, as a worker paused past its
// lease would leave it (the database's clock, not the test's, decides).
func lapse(t *testing.T, pool *pgxpool.Pool, l sendstate.Lease) {
	t.Helper()
	pgtest.Exec(t, pool, `UPDATE sendonce_worker SET lease_until = now() - interval '1 second' WHERE id = $1`, l.ID)
}

func claimAs(t *testing.T, pool *pgxpool.Pool, key string, l sendstate.Lease) *sendstate.Claimed {
	t.Helper()
	opts := claimOpts
	opts.Owner = l.Epoch
	c, ok, err := sendstate.Claim(context.Background(), pool, request(t, pool, key), opts)
	if err != nil || !ok {
		t.Fatalf("claim %s under epoch %d: %v, %v", key, l.Epoch, ok, err)
	}
	return c
}

// claimedUnderLease sets up an outbox holding key with a River job of its
// own (setupJobs: an upgraded database's intent), takes a lease for the
// worker name and claims key under it.
func claimedUnderLease(t *testing.T, key, name string) (*pgxpool.Pool, *sendstate.Scheduler, sendstate.Lease) {
	t.Helper()
	pool, _, jobs := setupJobs(t, key)
	l := takeLease(t, pool, name)
	claimAs(t, pool, key, l)
	return pool, jobs, l
}

// A worker that dies leaves its intents sending; once a sweeper has ended
// its lapsed lease, RescueAbandoned hands them to new jobs. A held lease,
// even one past its end within the restart grace, keeps them. The intent
// has a job of its own, as in a database upgraded from a release before
// the drain (a drained one is RescueDrained's: TestClaimDueUnderALease).
func TestRescueAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setupJobs(t, "r:a")
	l := takeLease(t, pool, "owner")
	req := request(t, pool, "r:a")
	if c := claimAs(t, pool, "r:a", l); c.Owner != l.Epoch || *get(t, pool, "r:a").ClaimedBy != l.Epoch {
		t.Fatalf("claim: owner %d, claimed_by %v; want epoch %d", c.Owner, get(t, pool, "r:a").ClaimedBy, l.Epoch)
	}
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 0 {
		t.Fatalf("ExpireLeases with the lease renewed = %d, %v; want 0", n, err)
	}
	if n, err := jobs.RescueAbandoned(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RescueAbandoned with the owner alive = %d, %v; want 0", n, err)
	}
	lapse(t, pool, l)
	// Within the grace after a database start, no lease is ended.
	if n, err := jobs.ExpireLeases(ctx, 100*365*24*time.Hour); err != nil || n != 0 {
		t.Fatalf("ExpireLeases within the restart grace = %d, %v; want 0", n, err)
	}
	if n, err := jobs.RescueAbandoned(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RescueAbandoned before the lapsed lease was ended = %d, %v; want 0", n, err)
	}
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases after the lease lapsed = %d, %v; want 1", n, err)
	}
	n, err := jobs.RescueAbandoned(ctx, 0)
	rec := get(t, pool, "r:a")
	if err != nil || n != 1 || *rec.JobID == req.JobID || rec.State != outbox.StateSending || rec.ClaimedBy != nil {
		t.Fatalf("RescueAbandoned after the lease ended = %d, %v; intent %+v", n, err, rec)
	}
	// The old job can no longer claim; the new one can, and its claim
	// marks the intent uncertain (the dead owner may have sent it).
	if _, ok, _ := sendstate.Claim(ctx, pool, req, claimOpts); ok {
		t.Fatal("the superseded job claimed the intent")
	}
	c := claim(t, pool, "r:a")
	if !c.Record.Uncertain || c.Record.Attempts != 2 {
		t.Fatalf("claim after rescue: %+v", c.Record)
	}
	if state := outboxtest.Value[string](t, pool, `SELECT end_reason FROM sendonce_worker WHERE id = $1`, l.ID); state != "lapsed" {
		t.Errorf("the ended lease's end_reason = %q, want lapsed", state)
	}
}

// Issue 24, item 1: a worker paused past its lease, whose intents another
// worker took over, records nothing for them: no success, no retry, no
// park, no claim. Its renewal finds the lease ended, and the epoch it
// takes then claims afresh. The intents have jobs of their own, as in a
// database upgraded from a release before the drain; a drained intent's
// late answer is TestClaimDueUnderALease's.
func TestLapsedOwnerRecordsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setupJobs(t, "p:1", "p:2")
	a := takeLease(t, pool, "paused")
	claimAs(t, pool, "p:1", a)
	jobA := request(t, pool, "p:1").JobID
	lapse(t, pool, a)
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	if n, err := jobs.RescueAbandoned(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RescueAbandoned = %d, %v; want 1", n, err)
	}
	b := takeLease(t, pool, "survivor")
	claimAs(t, pool, "p:1", b)
	before := get(t, pool, "p:1")

	// The paused worker wakes with the API's answer in hand.
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "p:1", MessageID: "msg_paused", Owner: a.Epoch}); !errors.Is(err, sendstate.ErrLeaseLost) {
		t.Errorf("MarkSent under the ended lease: %v, want ErrLeaseLost", err)
	}
	for _, mark := range []func(context.Context, sendstate.DB, sendstate.Outcome) error{sendstate.MarkPending, sendstate.MarkFailed, sendstate.MarkSuppressed} {
		if err := mark(ctx, pool, sendstate.Outcome{Key: "p:1", JobID: jobA, Reason: "paused", Owner: a.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	// Even with the new job's id, the old epoch records nothing.
	if err := sendstate.MarkFailed(ctx, pool, sendstate.Outcome{Key: "p:1", JobID: *before.JobID, Reason: "paused", Owner: a.Epoch}); err != nil {
		t.Fatal(err)
	}
	after := get(t, pool, "p:1")
	if after.State != outbox.StateSending || after.MessageID != "" || after.LastError != before.LastError || *after.ClaimedBy != b.Epoch {
		t.Fatalf("the paused worker recorded over the survivor's claim: before %+v, after %+v", before, after)
	}
	opts := claimOpts
	opts.Owner = a.Epoch
	if _, _, err := sendstate.Claim(ctx, pool, request(t, pool, "p:2"), opts); !errors.Is(err, sendstate.ErrLeaseLost) {
		t.Errorf("claim under the ended lease: %v, want ErrLeaseLost", err)
	}
	if r, err := sendstate.Renew(ctx, pool, a, sendstate.DefaultLease, nil); err != nil || r.Held {
		t.Fatalf("Renew of the ended lease = %+v, %v; want not held", r, err)
	}
	a2, err := sendstate.TakeLease(ctx, pool, a, sendstate.Holder{Host: "paused", PID: 1}, sendstate.DefaultLease)
	if err != nil || a2.ID != a.ID || a2.Epoch == a.Epoch {
		t.Fatalf("TakeLease after the lease ended = %+v, %v; want id %d and a new epoch", a2, err, a.ID)
	}
	claimAs(t, pool, "p:2", a2)

	// The survivor's success is recorded.
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "p:1", MessageID: "msg_1", Replayed: true, Owner: b.Epoch}); err != nil {
		t.Fatal(err)
	}
	if rec := get(t, pool, "p:1"); rec.State != outbox.StateSent || rec.MessageID != "msg_1" {
		t.Fatalf("the survivor's success: %+v", rec)
	}
}

// A lease past its end that no sweeper has ended is renewed: nothing was
// taken from it, and its records stand.
func TestLateRenewalKeepsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, l := claimedUnderLease(t, "late:1", "slow")
	lapse(t, pool, l)
	if r, err := sendstate.Renew(ctx, pool, l, sendstate.DefaultLease, nil); err != nil || !r.Held {
		t.Fatalf("Renew = %+v, %v; want held", r, err)
	}
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "late:1", MessageID: "msg_1", Owner: l.Epoch}); err != nil {
		t.Fatal(err)
	}
}

// Of the held leases the lowest id is the fleet's sweeper; a lapsed one
// no longer counts, so the next takes over at its first renewal past the
// lapsed lease's end, and a lease that is not held is no sweeper.
func TestRenewNamesOneSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	a, b := takeLease(t, pool, "a"), takeLease(t, pool, "b")
	if a.ID >= b.ID {
		t.Fatalf("lease ids %d, %d: want the first taken lower", a.ID, b.ID)
	}
	renew := func(l sendstate.Lease) sendstate.Renewal {
		t.Helper()
		r, err := sendstate.Renew(ctx, pool, l, sendstate.DefaultLease, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := renew(a); !r.Held || !r.Sweeper {
		t.Fatalf("renewal of the lower lease = %+v, want held and the sweeper", r)
	}
	r := renew(b)
	if !r.Held || r.Sweeper {
		t.Fatalf("renewal of the higher lease = %+v, want held and not the sweeper", r)
	}
	if r.Takeover <= 0 || r.Takeover > sendstate.DefaultLease {
		t.Errorf("takeover in %s, want within the lease (%s)", r.Takeover, sendstate.DefaultLease)
	}
	lapse(t, pool, a)
	if r := renew(b); !r.Held || !r.Sweeper {
		t.Fatalf("renewal of the higher lease with the lower one lapsed = %+v, want held and the sweeper", r)
	}
	// The new sweeper ends the lapsed lease; the lower one, renewed late
	// but before that, would be the sweeper again.
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	if r := renew(a); r.Held || r.Sweeper {
		t.Fatalf("renewal of the ended lease = %+v, want neither held nor the sweeper", r)
	}
	if r := renew(b); !r.Held || !r.Sweeper {
		t.Fatalf("renewal of the only held lease = %+v, want held and the sweeper", r)
	}
	a2, err := sendstate.TakeLease(ctx, pool, a, sendstate.Holder{Host: "a", PID: 1}, sendstate.DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	if r := renew(a2); !r.Held || !r.Sweeper {
		t.Fatalf("renewal of the lower lease taken again = %+v, want held and the sweeper", r)
	}
	if r := renew(b); r.Sweeper {
		t.Fatalf("renewal of the higher lease with the lower one taken again = %+v, want not the sweeper", r)
	}
}

// A graceful stop ends the lease at once: what the worker left sending
// goes to another job (an upgraded database's intent with a job of its
// own), or back to the drain (a drained one), at the next sweep, not
// after the lease.
func TestReleasedLeaseIsRescuedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, jobs, l := claimedUnderLease(t, "rel:1", "stopping")
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, ob, "rel:drained")
	opts := claimOpts
	opts.Owner = l.Epoch
	if got := claimDue(t, pool, 5, opts); !equal(got, "rel:drained") {
		t.Fatalf("the drain claimed %v, want rel:drained", got)
	}
	if n, err := sendstate.RescueDrained(ctx, pool, 0); err != nil || n != 0 {
		t.Fatalf("RescueDrained under the held lease = %d, %v; want 0", n, err)
	}
	if err := sendstate.ReleaseLease(ctx, pool, l); err != nil {
		t.Fatal(err)
	}
	if n, err := jobs.RescueAbandoned(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RescueAbandoned after the release = %d, %v; want 1", n, err)
	}
	if n, err := sendstate.RescueDrained(ctx, pool, 0); err != nil || n != 1 {
		t.Fatalf("RescueDrained after the release = %d, %v; want 1", n, err)
	}
	if rec := get(t, pool, "rel:drained"); rec.State != outbox.StatePending || !rec.Uncertain || rec.JobID != nil {
		t.Errorf("rel:drained after the rescue: %+v, want pending on the drain, uncertain", rec)
	}
	if r := outboxtest.Value[string](t, pool, `SELECT end_reason FROM sendonce_worker WHERE id = $1`, l.ID); r != "stopped" {
		t.Errorf("end_reason = %q, want stopped", r)
	}
}

// A batch's record under an ended lease records nothing either.
func TestLapsedOwnerRecordsNoBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	l := takeLease(t, pool, "batcher")
	pgtest.Exec(t, pool, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, state, claimed_by)
		VALUES ('batch:1', $1, '{"emails":[]}', ARRAY['m:1'], 'sending', $2)`, outbox.DefaultQueue, l.Epoch)
	lapse(t, pool, l)
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v", n, err)
	}
	if _, err := sendstate.RecordBatch(ctx, pool, "batch:1", l.Epoch, 0, nil, nil); !errors.Is(err, sendstate.ErrLeaseLost) {
		t.Errorf("RecordBatch under the ended lease: %v, want ErrLeaseLost", err)
	}
	if s := outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_batch WHERE idempotency_key = 'batch:1'`); s != "sending" {
		t.Errorf("batch state %q after a record under an ended lease, want sending", s)
	}
	if n, err := jobs.RescueAbandonedBatches(ctx, 0); err != nil || n != 1 {
		t.Errorf("RescueAbandonedBatches = %d, %v; want 1", n, err)
	}
}

// Hole 12 (issue 22), kept with leases: the rescue reads only this
// database's leases. Epochs come from each database's own sequence, so
// epoch 7 may be held in one database and dead in another on the same
// server; only a lease of this database proves its owner alive.
func TestRescueReadsOnlyThisDatabasesLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Intents with jobs of their own (an upgraded database's, for
	// RescueAbandoned) and drained ones (RescueDrained) in each.
	poolA, jobsA, la := claimedUnderLease(t, "xa:live", "a")
	optsA := claimOpts
	optsA.Owner = la.Epoch
	obA, err := outbox.New(poolA, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, poolA, obA, "xa:drained")
	claimDue(t, poolA, 1, optsA)
	// Database xb on the same server: its worker with the same epoch
	// claimed intents and is gone (no lease row).
	poolB, obB, jobsB := setupJobs(t, "xb:dead")
	enqueue(t, poolB, obB, "xb:drained")
	opts := claimOpts
	if _, ok, err := sendstate.Claim(ctx, poolB, request(t, poolB, "xb:dead"), opts); err != nil || !ok {
		t.Fatal(ok, err)
	}
	claimDue(t, poolB, 1, opts)
	pgtest.Exec(t, poolB, `UPDATE sendonce_outbox SET claimed_by = $1`, la.Epoch)
	for _, p := range []*pgxpool.Pool{poolA, poolB} {
		pgtest.Exec(t, p, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, state, claimed_by)
			VALUES ('batch:1', $1, '{"emails":[]}', ARRAY['m:1'], 'sending', $2)`, outbox.DefaultQueue, la.Epoch)
	}
	if n, err := jobsB.RescueAbandoned(ctx, 0); err != nil || n != 1 {
		t.Errorf("xb: RescueAbandoned = %d, %v; want 1: its worker is gone, whatever xa's worker of the same epoch does", n, err)
	}
	if n, err := jobsB.RescueAbandonedBatches(ctx, 0); err != nil || n != 1 {
		t.Errorf("xb: RescueAbandonedBatches = %d, %v; want 1", n, err)
	}
	if n, err := sendstate.RescueDrained(ctx, poolB, 0); err != nil || n != 1 {
		t.Errorf("xb: RescueDrained = %d, %v; want 1", n, err)
	}
	if n, err := jobsA.RescueAbandoned(ctx, 0); err != nil || n != 0 {
		t.Errorf("xa: RescueAbandoned = %d, %v; want 0: its worker is alive", n, err)
	}
	if n, err := sendstate.RescueDrained(ctx, poolA, 0); err != nil || n != 0 {
		t.Errorf("xa: RescueDrained = %d, %v; want 0: its worker is alive", n, err)
	}
	if n, err := jobsA.RescueAbandonedBatches(ctx, 0); err != nil || n != 0 {
		t.Errorf("xa: RescueAbandonedBatches = %d, %v; want 0", n, err)
	}
}

// Workers shows each instance's lease as an operator reads it: held,
// overdue (past its end, not yet ended), lapsed, stopped, and which one's
// River client leads.
func TestWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	h := sendstate.Holder{Host: "host-a", PID: 41, RiverClientID: "river-a"}
	held, err := sendstate.TakeLease(ctx, pool, sendstate.Lease{}, h, sendstate.DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	overdue, lapsed, stopped := takeLease(t, pool, "b"), takeLease(t, pool, "c"), takeLease(t, pool, "d")
	lapse(t, pool, lapsed)
	if _, err := jobs.ExpireLeases(ctx, 0); err != nil {
		t.Fatal(err)
	}
	lapse(t, pool, overdue)
	if err := sendstate.ReleaseLease(ctx, pool, stopped); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `INSERT INTO river_leader (elected_at, expires_at, leader_id) VALUES (now(), now() + interval '15 seconds', 'river-a')`)

	ws, err := sendstate.Workers(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]sendstate.WorkerLease{}
	for _, w := range ws {
		got[w.ID] = w
	}
	want := map[int32]string{held.ID: sendstate.LeaseStateHeld, overdue.ID: sendstate.LeaseStateOverdue, lapsed.ID: sendstate.LeaseStateLapsed, stopped.ID: sendstate.LeaseStateStopped}
	if len(ws) != len(want) {
		t.Fatalf("Workers = %+v, want %d", ws, len(want))
	}
	for id, state := range want {
		if got[id].State != state {
			t.Errorf("worker %d: state %q, want %q", id, got[id].State, state)
		}
	}
	a := got[held.ID]
	if !a.Leader || a.Host != "host-a" || a.PID != 41 || a.RiverClientID != "river-a" || a.Epoch != held.Epoch || a.StartedAt.IsZero() || !a.LeaseUntil.After(a.RenewedAt) {
		t.Errorf("the held lease: %+v", a)
	}
	if got[overdue.ID].Leader {
		t.Errorf("worker %d is not the leader", overdue.ID)
	}
	if ws[0].State != sendstate.LeaseStateHeld && ws[0].State != sendstate.LeaseStateOverdue {
		t.Errorf("an ended lease listed first: %+v", ws[0])
	}
}

// A worker that dies while its jobs wait before their claim (for the
// fleet's budget, in a backoff) leaves their intents pending under River
// jobs still running; once its lease is ended, RescueStranded gives those
// intents new jobs. A live worker's running jobs, and pending intents no
// job runs, are left alone. The intents have jobs of their own, as in a
// database upgraded from a release before the drain: a drained intent has
// no job to be stranded under.
func TestRescueStranded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setupJobs(t, "str:dead", "str:live", "str:idle")
	lease := func(name string) sendstate.Lease {
		l, err := sendstate.TakeLease(ctx, pool, sendstate.Lease{}, sendstate.Holder{Host: name, PID: 1, RiverClientID: "client-" + name}, sendstate.DefaultLease)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	dead, _ := lease("dead"), lease("live")
	for _, name := range []string{"dead", "live"} {
		pgtest.Exec(t, pool, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY[$2]
			WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = $1)`, "str:"+name, "client-"+name)
	}
	jobOf := func(key string) int64 {
		return outboxtest.Value[int64](t, pool, `SELECT job_id FROM sendonce_outbox WHERE idempotency_key = $1`, key)
	}
	before := map[string]int64{"str:dead": jobOf("str:dead"), "str:live": jobOf("str:live"), "str:idle": jobOf("str:idle")}

	if n, err := jobs.RescueStranded(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RescueStranded while every lease is held = %d, %v; want 0", n, err)
	}
	lapse(t, pool, dead)
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	if n, err := jobs.RescueStranded(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RescueStranded after the lease ended = %d, %v; want 1", n, err)
	}
	if j := jobOf("str:dead"); j == before["str:dead"] {
		t.Errorf("str:dead kept job %d, want a new one", j)
	}
	for _, k := range []string{"str:live", "str:idle"} {
		if j := jobOf(k); j != before[k] {
			t.Errorf("%s moved from job %d to %d, want it left alone", k, before[k], j)
		}
	}
	if s := outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_outbox WHERE idempotency_key = 'str:dead'`); s != "pending" {
		t.Errorf("str:dead is %s, want pending", s)
	}
	if n, err := jobs.RescueStranded(ctx, 0); err != nil || n != 0 {
		t.Errorf("RescueStranded again = %d, %v; want 0 (the new job is not running)", n, err)
	}
}

// leaseWithClient takes a lease for a worker instance whose River client
// is client-name, the id River writes to river_job.attempted_by.
func leaseWithClient(t *testing.T, pool *pgxpool.Pool, name string) sendstate.Lease {
	t.Helper()
	l, err := sendstate.TakeLease(context.Background(), pool, sendstate.Lease{},
		sendstate.Holder{Host: name, PID: 1, RiverClientID: "client-" + name}, sendstate.DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Issue 44: a worker that dies after River fetched a batch's job, before
// the job claimed the batch (it waited for the fleet's budget), leaves the
// batch and its members pending under a job still running on its River
// client. No claim names the dead lease, so RescueAbandonedBatches cannot
// see it, and River's rescuer would run the job again only after
// RescueAfter, while a lone intent beside it is rescued in seconds
// (RescueStranded). Once the lease is ended, RescueStrandedBatches gives
// the batch and its members a new batch job under the same key; the old
// job, whenever it runs again, claims nothing. A live worker's running
// batch job, and a batch whose job no one runs, are left alone. The
// batches are frozen from intents with jobs of their own (Freeze of their
// jobs' requests), as in a database upgraded from a release before the
// drain.
func TestRescueStrandedBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := []string{"dead", "live", "idle"}
	var keys []string
	for _, name := range names {
		keys = append(keys, "sb:"+name+":1", "sb:"+name+":2")
	}
	pool, _, jobs := setupJobs(t, keys...)
	batcher := &sendstate.Batcher{Pool: pool, River: jobs.River}
	batch := map[string]string{} // the batch key of each name's members
	for _, name := range names {
		key, joined, err := batcher.Freeze(ctx, outbox.DefaultQueue, "",
			[]sendstate.ClaimRequest{request(t, pool, "sb:"+name+":1"), request(t, pool, "sb:"+name+":2")})
		if err != nil || len(joined) != 2 {
			t.Fatalf("Freeze of %s = %q, %v, %v", name, key, joined, err)
		}
		batch[name] = key
	}
	jobOf := func(name string) int64 {
		return outboxtest.Value[int64](t, pool, `SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1`, batch[name])
	}
	dead := leaseWithClient(t, pool, "dead")
	leaseWithClient(t, pool, "live")
	for _, name := range []string{"dead", "live"} {
		pgtest.Exec(t, pool, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY[$2]
			WHERE id = $1`, jobOf(name), "client-"+name)
	}
	before := map[string]int64{}
	for _, name := range names {
		before[name] = jobOf(name)
	}

	if n, err := jobs.RescueStrandedBatches(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RescueStrandedBatches while every lease is held = %d, %v; want 0", n, err)
	}
	lapse(t, pool, dead)
	if n, err := jobs.ExpireLeases(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	if n, err := jobs.RescueStrandedBatches(ctx, 100*365*24*time.Hour); err != nil || n != 0 {
		t.Fatalf("RescueStrandedBatches within the restart grace = %d, %v; want 0", n, err)
	}
	if n, err := jobs.RescueStrandedBatches(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RescueStrandedBatches after the lease ended = %d, %v; want 1", n, err)
	}

	newJob := jobOf("dead")
	if newJob == before["dead"] {
		t.Fatalf("the dead worker's batch kept job %d, want a new one", newJob)
	}
	var kind, argKey, jobState string
	var priority int
	if err := pool.QueryRow(ctx, `SELECT kind, args->>'key', state::text, priority FROM river_job WHERE id = $1`, newJob).Scan(
		&kind, &argKey, &jobState, &priority); err != nil {
		t.Fatal(err)
	}
	if kind != (sendjob.BatchArgs{}).Kind() || argKey != batch["dead"] || jobState != "available" || priority != sendjob.PriorityUrgent {
		t.Errorf("the new job: kind %s, key %q, state %s, priority %d; want an available %s job for %q, urgent",
			kind, argKey, jobState, priority, (sendjob.BatchArgs{}).Kind(), batch["dead"])
	}
	if s := outboxtest.Value[string](t, pool, `SELECT state FROM sendonce_batch WHERE idempotency_key = $1`, batch["dead"]); s != "pending" {
		t.Errorf("the rescued batch is %s, want pending", s)
	}
	for _, k := range []string{"sb:dead:1", "sb:dead:2"} {
		if r := get(t, pool, k); r.State != outbox.StatePending || r.BatchKey != batch["dead"] || r.JobID == nil || *r.JobID != newJob || r.Attempts != 0 {
			t.Errorf("%s: state %s, batch %q, job %v, attempts %d; want pending in batch %q under job %d, never attempted",
				k, r.State, r.BatchKey, r.JobID, r.Attempts, batch["dead"], newJob)
		}
	}
	for _, name := range []string{"live", "idle"} {
		if j := jobOf(name); j != before[name] {
			t.Errorf("the %s batch moved from job %d to %d, want it left alone", name, before[name], j)
		}
		for _, k := range []string{"sb:" + name + ":1", "sb:" + name + ":2"} {
			if r := get(t, pool, k); r.JobID == nil || *r.JobID != before[name] {
				t.Errorf("%s: job %v, want %d", k, r.JobID, before[name])
			}
		}
	}

	// The old job, run again (by River's rescuer), claims nothing; the new
	// one claims the whole batch under its key.
	opts := sendstate.BatchClaimOptions{ClaimOptions: claimOpts}
	if _, ok, err := sendstate.ClaimBatch(ctx, pool, sendstate.ClaimRequest{Key: batch["dead"], JobID: before["dead"]}, opts); err != nil || ok {
		t.Errorf("ClaimBatch by the old job = %v, %v; want nothing claimed", ok, err)
	}
	if n, err := jobs.RescueStrandedBatches(ctx, 0); err != nil || n != 0 {
		t.Errorf("RescueStrandedBatches again = %d, %v; want 0 (the new job is not running)", n, err)
	}
	b, ok, err := sendstate.ClaimBatch(ctx, pool, sendstate.ClaimRequest{Key: batch["dead"], JobID: newJob}, opts)
	if err != nil || !ok || b.Key != batch["dead"] || len(b.Members) != 2 || b.Attempts != 1 {
		t.Fatalf("ClaimBatch by the new job = %+v, %v, %v; want the batch's first attempt, both members", b, ok, err)
	}
}

// ExpireLeasesAndLook says when the first of the other held leases ends,
// so that the sweeper sweeps then: its own lease does not count, nor one
// past its end, which it ends.
func TestExpireLeasesAndLookNextEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	self, other := takeLease(t, pool, "self"), takeLease(t, pool, "other")
	look, err := jobs.ExpireLeasesAndLook(ctx, 0, self.ID)
	if err != nil {
		t.Fatal(err)
	}
	if look.Expired != 0 || look.NextEnd <= 0 || look.NextEnd > sendstate.DefaultLease {
		t.Fatalf("look with the other lease held = %+v; want none expired, the next end within the lease (%s)", look, sendstate.DefaultLease)
	}
	lapse(t, pool, other)
	if look, err = jobs.ExpireLeasesAndLook(ctx, 0, self.ID); err != nil || look.Expired != 1 || look.NextEnd != 0 || look.LastEnded.IsZero() {
		t.Fatalf("look with the other lease lapsed = %+v, %v; want it expired, no next end, a last end", look, err)
	}
	if look, err = jobs.ExpireLeasesAndLook(ctx, 0, other.ID); err != nil || look.Expired != 0 || look.NextEnd <= 0 {
		t.Fatalf("look of the ended lease's worker = %+v, %v; want the held lease's end", look, err)
	}
}
