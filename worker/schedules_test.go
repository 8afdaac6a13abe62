package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/pgtest"
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
			if _, err := tk.pool.Exec(ctx, `UPDATE sendonce_schedule SET next_at = now() - interval '3 years'`); err != nil {
				t.Fatal(err)
			}
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
			case missed == outbox.MissedLate && (len(runs) != 1 || runs[0].Key != outbox.OccurrenceRunKey("newyear", latest) || runs[0].Total != 3):
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
	if _, err := tk.pool.Exec(ctx, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
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
	if _, err := tk.pool.Exec(ctx, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second' WHERE name = 'elsewhere'`); err != nil {
		t.Fatal(err)
	}
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
	tk, ob := newTicker(t, nil)
	var clock time.Time
	tk.now = func() time.Time { return clock }
	const spec = "30 2 * * * Europe/Berlin"
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "nightly", Spec: spec, Statement: digestSQL}); err != nil {
		t.Fatal(err)
	}
	sched, err := outbox.ParseSpec(spec)
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
		for clock = from; clock.Before(from.Add(5 * time.Hour)); clock = clock.Add(5 * time.Minute) {
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
