package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/worker"
)

// The drain shows in River UI: a worker writes what its sends did as
// sendonce_drain jobs, one per interval in which it did anything, and works
// them itself, so they complete with the counts as their output. Five
// intents sent and one parked (its recipient suppressed) are counted so,
// across the reports, and no report is written for the idle intervals
// after.
func TestDrainReportsShowInRiver(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	for i := range 5 {
		insertSQL(t, pool, fmt.Sprintf("php:report:%d", i), fmt.Sprintf("r%d@example.com", i))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason, source) VALUES ('gone@example.com', 'bounced', 'report test')`); err != nil {
		t.Fatal(err)
	}
	insertSQL(t, pool, "php:report:gone", "gone@example.com")
	cfg := &worker.Config{Client: c, Concurrency: 4}
	worker.SetReportInterval(cfg, 200*time.Millisecond)
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	events, cancel := w.RiverClient().Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(ctx) })
	if err := fake.WaitDeliveries(ctx, 5); err != nil {
		t.Fatal(err)
	}
	var sum worker.DrainReportArgs
	for reports := 0; sum.Sent < 5 || sum.Parked < 1; {
		select {
		case e := <-events:
			if e.Job.Kind != (worker.DrainReportArgs{}).Kind() {
				continue
			}
			reports++
			var args, out worker.DrainReportArgs
			if err := json.Unmarshal(e.Job.EncodedArgs, &args); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(e.Job.Output(), &out); err != nil {
				t.Fatalf("report %d's output %q: %v", reports, e.Job.Output(), err)
			}
			if out != args || args.Worker != w.RiverClient().ID() || !args.To.After(args.From) || args.Claimed == 0 {
				t.Fatalf("report %d: args %+v, output %+v; want the same counts, this worker, an interval, some claims", reports, args, out)
			}
			sum.Claimed += args.Claimed
			sum.Sent += args.Sent
			sum.Parked += args.Parked
			sum.Replayed += args.Replayed
		case <-ctx.Done():
			t.Fatalf("waiting for the reports of 5 sent and 1 parked: %+v", sum)
		}
	}
	if sum.Claimed != 6 || sum.Sent != 5 || sum.Parked != 1 || sum.Replayed != 0 {
		t.Fatalf("reports sum to %+v, want 6 claimed, 5 sent, 1 parked, none replayed", sum)
	}
	// Idle now: the reporting goes on, but writes nothing.
	reports := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'sendonce_drain'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := reports()
	if err := sleepIntervals(ctx, 3, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if after := reports(); after != before {
		t.Fatalf("%d reports written while idle, want none", after-before)
	}
}

// sleepIntervals waits n intervals: the idle reporting has nothing to
// signal, so the test can only give it the time to write a report it
// must not write.
func sleepIntervals(ctx context.Context, n int, d time.Duration) error {
	select {
	case <-time.After(time.Duration(n) * d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
