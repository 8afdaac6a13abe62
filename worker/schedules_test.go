package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/cronspec"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// digestSQL makes one member per row of the application's own table.
const digestSQL = `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
	SELECT $1 || ':' || u.id, 'email',
		jsonb_build_object('from', 'news@example.com', 'to', jsonb_build_array(u.email), 'subject', 'Digest', 'text', 'Hello'),
		$1
	FROM app_user u`

func newTicker(t *testing.T, producers map[string]Producer) (*ticker, *outbox.Outbox) {
	t.Helper()
	pool := pgtest.NewDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE app_user (id int PRIMARY KEY, email text NOT NULL);
		INSERT INTO app_user SELECT i, 'user' || i || '@example.com' FROM generate_series(1, 3) i`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &ticker{pool: pool, outbox: ob, producers: producers}, ob
}

// newClockedTicker is newTicker with no producers, whose clock reads
// *clock, which the test sets.
func newClockedTicker(t *testing.T) (*ticker, *outbox.Outbox, *time.Time) {
	t.Helper()
	tk, ob := newTicker(t, nil)
	clock := new(time.Time)
	tk.now = func() time.Time { return *clock }
	return tk, ob, clock
}

// TestTickMissedOccurrences: a schedule whose occurrences fell due while no
// worker ran gets the latest of them created once (late), or none (skip),
// and moves on to its next occurrence after now either way.
func TestTickMissedOccurrences(t *testing.T) {
	t.Parallel()
	for _, missed := range []outbox.Missed{outbox.MissedLate, outbox.MissedSkip} {
		t.Run(string(missed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tk, ob := newTicker(t, nil)
			if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "newyear", Spec: "0 0 1 1 *", Statement: digestSQL, Missed: missed}); err != nil {
				t.Fatal(err)
			}
			// The workers were away for three years.
			pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() - interval '3 years'`)
			for range 2 { // a second tick finds nothing due
				if _, err := tk.tick(ctx); err != nil {
					t.Fatal(err)
				}
			}
			runs, err := ob.Runs(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			latest := time.Date(time.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
			switch {
			case missed == outbox.MissedLate && (len(runs) != 1 || runs[0].Key != cronspec.RunKey("newyear", latest) || runs[0].Total != 3):
				t.Fatalf("late: runs %+v, want one run of the latest occurrence (%s) with 3 members", runs, latest)
			case missed == outbox.MissedSkip && len(runs) != 0:
				t.Fatalf("skip: runs %+v, want none", runs)
			}
			s, err := ob.Schedules(ctx)
			if err != nil || len(s) != 1 || !s[0].NextAt.After(time.Now()) {
				t.Fatalf("schedules %+v, %v; want the next occurrence after now", s, err)
			}
		})
	}
}

// TestTickTwiceCreatesOnce: two workers ticking the same due occurrence at
// once (or one again after a crash) create one run with one intent per
// member; a Go producer's members go in with it.
func TestTickTwiceCreatesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	producers := map[string]Producer{"invoices": func(ctx context.Context, tx pgx.Tx, occ Occurrence) ([]outbox.Intent, error) {
		calls++
		var out []outbox.Intent
		for i := range 4 {
			out = append(out, outbox.Intent{Key: fmt.Sprintf("%s:inv_%d", occ.RunKey, i),
				Payload: fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}`, i)})
		}
		return out, nil
	}}
	tk, ob := newTicker(t, producers)
	other := &ticker{pool: tk.pool, outbox: tk.outbox, producers: producers}
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "monthly", Spec: "0 6 1 * *", Producer: "invoices"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second'`)
	// The same occurrence ticked by two workers at once.
	errs := make(chan error, 2)
	for _, w := range []*ticker{tk, other} {
		go func() { _, err := w.tick(ctx); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	runs, err := ob.Runs(ctx, nil)
	if err != nil || len(runs) != 1 || runs[0].Total != 4 || !strings.HasPrefix(runs[0].Key, "monthly:") || calls != 1 {
		t.Fatalf("runs %+v, %v, producer called %d times; want one run of 4, one call", runs, err, calls)
	}
	// A schedule naming a producer this worker lacks is left alone.
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "elsewhere", Spec: "@every 1s", Producer: "missing"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second' WHERE name = 'elsewhere'`)
	if n, err := tk.tick(ctx); err != nil || n != 0 {
		t.Fatalf("tick with an unknown producer = %d, %v; want 0, nil", n, err)
	}
}

// TestTickAcrossDST: hole 11 (issue 22) through the tick. Workers ticking
// through the nights of the clock changes with `30 2 * * * Europe/Berlin`
// made two runs on 2026-10-25 (02:30 CEST and 02:30 CET) and none on
// 2026-03-29 (no 02:30). Each night makes one run now: at 02:30 CEST in
// autumn, at 03:00 CEST (the first instant after the jump) in spring.
func TestTickAcrossDST(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk, ob, clock := newClockedTicker(t)
	const spec = "30 2 * * * Europe/Berlin"
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "nightly", Spec: spec, Statement: digestSQL}); err != nil {
		t.Fatal(err)
	}
	sched, err := cronspec.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, night := range []struct{ from, next string }{
		{"2026-03-28T23:00:00Z", "2026-03-30T00:30:00Z"}, // 00:00 CET, to 05:00 CEST
		{"2026-10-24T22:00:00Z", "2026-10-26T01:30:00Z"}, // 00:00 CEST, to 04:00 CET
	} {
		from, err := time.Parse(time.RFC3339, night.from)
		if err != nil {
			t.Fatal(err)
		}
		// The schedule as it stands at midnight.
		pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = $1`, sched.Next(from))
		// A tick every 5 minutes through the night (the workers tick every
		// second; a finer step only repeats the ticks that find nothing).
		for *clock = from; clock.Before(from.Add(5 * time.Hour)); *clock = clock.Add(5 * time.Minute) {
			if _, err := tk.tick(ctx); err != nil {
				t.Fatalf("tick at %s: %v", clock.Format(time.RFC3339), err)
			}
		}
		var next time.Time
		if err := tk.pool.QueryRow(ctx, `SELECT next_at FROM sendonce_schedule`).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if got := next.UTC().Format(time.RFC3339); got != night.next {
			t.Errorf("after the night of %s: next occurrence %s, want %s", night.from, got, night.next)
		}
	}
	runs, err := ob.Runs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, fmt.Sprintf("%s (%d members)", r.Key, r.Total))
	}
	slices.Sort(got)
	want := []string{"nightly:2026-03-29T01:00:00Z (3 members)", "nightly:2026-10-25T00:30:00Z (3 members)"}
	if !slices.Equal(got, want) {
		t.Fatalf("runs of the two nights:\n got  %v\n want %v", got, want)
	}
}

// TestFailingScheduleDoesNotBlockOthers: hole 10 (issue 22). The tick took
// the earliest due schedule and stopped at its first error, so a schedule
// whose statement fails starved every healthy schedule due after it, on
// every tick. Now its failure is recorded on it (and logged once), the tick
// goes on, and it is tried again after a backoff, not on every tick; once
// fixed, it creates its occurrence as if nothing had happened.
func TestFailingScheduleDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk, ob, clock := newClockedTicker(t)
	var logs strings.Builder
	tk.logger = slog.New(slog.NewTextHandler(&logs, nil))
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tick := func(now string, wantCreated int) {
		t.Helper()
		*clock = at(now)
		if n, err := tk.tick(ctx); err != nil || n != wantCreated {
			t.Fatalf("tick at %s = %d, %v; want %d, nil", now, n, err, wantCreated)
		}
	}
	schedule := func(name string) *outbox.Schedule {
		t.Helper()
		all, err := ob.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no schedule %s", name)
		return nil
	}
	// broken reads a table the application has not made yet; it is due a
	// minute before digest, so the tick finds it first.
	brokenSQL := strings.ReplaceAll(digestSQL, "app_user", "app_customer")
	for _, s := range []outbox.Schedule{
		{Name: "broken", Spec: "0 7 * * *", Statement: brokenSQL},
		{Name: "digest", Spec: "1 7 * * *", Statement: digestSQL},
	} {
		if _, err := ob.SaveSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = CASE name
		WHEN 'broken' THEN '2026-12-07T07:00:00Z'::timestamptz ELSE '2026-12-07T07:01:00Z' END`)

	tick("2026-12-07T07:01:00Z", 1)
	if s := schedule("digest"); s.LastRun != "digest:2026-12-07T07:01:00Z" || s.Failures != 0 {
		t.Fatalf("digest after the tick: %+v; want its run created behind the failing schedule", s)
	}
	b := schedule("broken")
	if b.Failures != 1 || !strings.Contains(b.LastError, `"app_customer" does not exist`) || b.FailedAt == nil ||
		!b.FailedAt.Equal(at("2026-12-07T07:01:00Z")) || b.RetryAt == nil || !b.RetryAt.Equal(at("2026-12-07T07:01:10Z")) ||
		!b.NextAt.Equal(at("2026-12-07T07:00:00Z")) || b.LastRun != "" {
		t.Fatalf("broken after its failure: %+v; want 1 failure with the error, tried again at 07:01:10, still due at 07:00", b)
	}
	// Ticks before the retry do not try it: no hot loop.
	tick("2026-12-07T07:01:01Z", 0)
	tick("2026-12-07T07:01:09Z", 0)
	if b := schedule("broken"); b.Failures != 1 {
		t.Fatalf("broken tried before its retry: %d failures", b.Failures)
	}
	// The retry fails the same way: counted, the backoff doubles, and the
	// error, logged already, is not logged again.
	tick("2026-12-07T07:01:10Z", 0)
	if b := schedule("broken"); b.Failures != 2 || b.RetryAt == nil || !b.RetryAt.Equal(at("2026-12-07T07:01:30Z")) {
		t.Fatalf("broken after its second failure: %+v; want 2 failures, tried again at 07:01:30", b)
	}
	if n := strings.Count(logs.String(), "app_customer"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	// The application makes the table: the next try creates the
	// occurrence's run (late, by the default policy) and the schedule is
	// healthy again.
	pgtest.Exec(t, tk.pool, `CREATE TABLE app_customer (id int PRIMARY KEY, email text NOT NULL);
		INSERT INTO app_customer VALUES (1, 'one@example.com'), (2, 'two@example.com')`)
	tick("2026-12-07T07:01:30Z", 1)
	b = schedule("broken")
	if b.Failures != 0 || b.LastError != "" || b.FailedAt != nil || b.RetryAt != nil ||
		b.LastRun != "broken:2026-12-07T07:00:00Z" || !b.NextAt.Equal(at("2026-12-08T07:00:00Z")) {
		t.Fatalf("broken once fixed: %+v; want its run of 07:00, healthy, next due tomorrow", b)
	}
	st, err := ob.RunStatus(ctx, "broken:2026-12-07T07:00:00Z")
	if err != nil || st.Total != 2 {
		t.Fatalf("the fixed schedule's run: %+v, %v; want 2 members", st, err)
	}
	if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "works again") {
		t.Errorf("no recovery logged:\n%s", logs.String())
	}
	// Replacing a failing schedule (`sendonce schedule add` again) clears
	// its failures.
	pgtest.Exec(t, tk.pool, `DROP TABLE app_customer`)
	tick("2026-12-08T07:00:00Z", 0)
	if b := schedule("broken"); b.Failures != 1 {
		t.Fatalf("broken failing again: %+v", b)
	}
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "broken", Spec: "0 7 * * *", Statement: digestSQL}); err != nil {
		t.Fatal(err)
	}
	if b := schedule("broken"); b.Failures != 0 || b.LastError != "" || b.RetryAt != nil || b.FailedAt != nil {
		t.Fatalf("broken replaced: %+v; want its failures cleared", b)
	}
}

// TestFailingProducerLeavesNothing: a Go producer that wrote through the
// occurrence's transaction and then failed leaves none of it behind (nor
// the run): the failure is recorded on the schedule alone.
func TestFailingProducerLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producers := map[string]Producer{"half": func(ctx context.Context, tx pgx.Tx, occ Occurrence) ([]outbox.Intent, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO app_user VALUES (99, 'half@example.com')`); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the invoices of %s are not ready", occ.RunKey)
	}}
	tk, ob := newTicker(t, producers)
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "half", Spec: "@hourly", Producer: "half"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second'`)
	if n, err := tk.tick(ctx); err != nil || n != 0 {
		t.Fatalf("tick = %d, %v; want 0, nil", n, err)
	}
	var users, runs int
	if err := tk.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM app_user), (SELECT count(*) FROM sendonce_run)`).Scan(&users, &runs); err != nil {
		t.Fatal(err)
	}
	all, err := ob.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if users != 3 || runs != 0 || len(all) != 1 || all[0].Failures != 1 ||
		!strings.Contains(all[0].LastError, `producer "half": the invoices of half:`) || all[0].RetryAt == nil {
		t.Fatalf("after the failing producer: %d users (want 3), %d runs (want 0), schedule %+v", users, runs, all[0])
	}
}
