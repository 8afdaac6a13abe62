package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestWorkerRescuesStrandedBatch (issue 44): a worker killed after River
// fetched a batch's job, before the job claimed the batch, leaves the batch
// pending under a job running on its River client. A running worker sends
// it within seconds of the dead worker's lease, as it does a lone intent,
// not after River's rescuer (RescueAfter, six minutes at defaults). The
// dead worker is its traces: its lease, lapsed, and River's row of the
// job, running under its client's id.
func TestWorkerRescuesStrandedBatch(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	var keys []string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 2 {
			res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("stranded-batch:%d", i), Payload: body(fmt.Sprintf("sb%d@example.com", i))})
			if err != nil {
				return err
			}
			keys = append(keys, res.Record.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Members with River jobs of their own, which froze them: a database
	// upgraded from a release before the drain holds such batches.
	outboxtest.GiveJobs(t, pool, keys...)
	var reqs []sendstate.ClaimRequest
	for _, k := range keys {
		reqs = append(reqs, sendstate.ClaimRequest{Key: k, JobID: *outboxtest.Get(t, ob, k).JobID})
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, joined, err := (&sendstate.Batcher{Pool: pool, River: rc}).Freeze(ctx, outbox.DefaultQueue, "", reqs)
	if err != nil || len(joined) != 2 {
		t.Fatalf("Freeze = %q, %v, %v", key, joined, err)
	}
	dead, err := sendstate.TakeLease(ctx, pool, sendstate.Lease{},
		sendstate.Holder{Host: "killed", PID: 1, RiverClientID: "killed-client"}, sendstate.DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['killed-client']
		WHERE id = (SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1)`, key)
	pgtest.Exec(t, pool, `UPDATE sendonce_worker SET lease_until = now() - interval '1 second' WHERE id = $1`, dead.ID)

	start(t, pool, &worker.Config{Client: c, Concurrency: 4, Coalesce: 10, SweepInterval: 20 * time.Millisecond,
		RestartGrace: time.Nanosecond})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fake.WaitDeliveries(wctx, 2); err != nil {
		t.Fatalf("the stranded batch was not sent within 10 s: %v (%d deliveries)", err, len(fake.Deliveries()))
	}
	waitSettled(t, ob, 2)
	for _, r := range reqs {
		if rec := outboxtest.Get(t, ob, r.Key); rec.State != outbox.StateSent || rec.BatchKey != key {
			t.Errorf("%s: state %s, batch %q; want sent in batch %q", r.Key, rec.State, rec.BatchKey, key)
		}
	}
	for _, r := range fake.Requests() {
		if r.Path != "/emails/batch" || r.IdempotencyKey != key {
			t.Errorf("request %s under key %q, want only the batch's, under %q", r.Path, r.IdempotencyKey, key)
		}
	}
}
