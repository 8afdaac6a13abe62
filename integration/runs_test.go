package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// runCounts counts a run's members by state.
func runCounts(ctx context.Context, pool *pgxpool.Pool, run string) (counts, error) {
	return countBy(ctx, pool, fmt.Sprintf(`SELECT state, count(*) FROM sendonce_outbox WHERE run_key = '%s' GROUP BY state`, run))
}

// TestRunLifecycle drains a billing run of 5,000 emails through two
// coalescing workers (25 to a request) at 20 requests/s, pauses it at 30% (nothing more is
// sent while it is paused), resumes it, and cancels it at 60%: the members
// sent plus those canceled are all of them, no canceled member reaches the
// API, nothing is delivered twice, and a lone transactional email enqueued
// while the run goes is sent within 2 s.
func TestRunLifecycle(t *testing.T) {
	setup(t)
	start := time.Now()
	ctx := context.Background()
	n := 5000
	const run = "billing:2026-12"
	srv := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{apiKey}, Seed: seedFor("runs"),
		Rate: []fakeapi.RateLimit{{Count: 20, Per: time.Second}}})
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "runs")
	e := processEnv(dbURL, srv)

	// The run is enqueued in five transactions, the first twice over (a
	// producer that crashed and ran again).
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	intents := make([]intent, n)
	for i := range intents {
		intents[i] = emailIntent(fmt.Sprintf("invoice:2026-12:%d", i), fmt.Sprintf("customer%d@example.com", i))
	}
	for _, part := range [][2]int{{0, 1000}, {0, 1000}, {1000, 2000}, {2000, 3000}, {3000, 4000}, {4000, n}} {
		ins := make([]outbox.Intent, 0, part[1]-part[0])
		for _, in := range intents[part[0]:part[1]] {
			ins = append(ins, in.outboxIntent())
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: run, Intents: ins})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Batches of 25 at 20 requests/s: 500 emails a second, so the run
	// lasts long enough (10 s) for a pause and a cancel to land in it.
	opts := workerOptions{Concurrency: 100, Coalesce: 25, APIRate: "20/s"}
	workers := []*proc{startWorker(t, "worker0", e, opts), startWorker(t, "worker1", e, opts)}
	sent := func() int {
		c, err := runCounts(ctx, pool, run)
		if err != nil {
			t.Fatal(err)
		}
		return c["sent"]
	}

	waitFor(t, time.Minute, "30% of the run sent", func() (bool, string) { s := sent(); return s >= n*30/100, fmt.Sprint(s) })
	mustRun(t, "pause", e, nil, "run", "pause", run)
	// What was in flight finishes; then nothing moves while paused. A
	// claim whose statement read the run before the pause committed is in
	// flight too, though it may commit after the pause returned: first
	// every transaction older than the pause ends, then no member is
	// sending.
	var pausedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&pausedAt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the transactions older than the pause to end", func() (bool, string) {
		var older int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start < $1`,
			pausedAt).Scan(&older)
		return err == nil && older == 0, fmt.Sprintf("%d open (err %v)", older, err)
	})
	waitFor(t, 30*time.Second, "no member sending", func() (bool, string) {
		c, _ := runCounts(ctx, pool, run)
		return c["sending"] == 0, c.String()
	})
	atPause := sent()
	deliveriesAtPause := len(srv.Deliveries())
	quiet := time.Now()
	for time.Since(quiet) < 2*time.Second { // an absence is observed over a span, not awaited
		if s := sent(); s != atPause {
			t.Fatalf("%d members sent while the run was paused (from %d)", s-atPause, atPause)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := len(srv.Deliveries()); d != deliveriesAtPause {
		t.Fatalf("%d deliveries while the run was paused", d-deliveriesAtPause)
	}
	show := mustRun(t, "show", e, nil, "run", "show", run)
	if !strings.Contains(show.stdout, "state:") || !strings.Contains(show.stdout, "paused") {
		t.Errorf("run show while paused:\n%s", show.stdout)
	}
	mustRun(t, "resume", e, nil, "run", "resume", run)

	// A password reset enqueued while the run goes on.
	lone := emailIntent("password-reset:user_7", "ada@example.com")
	enqueueGo(t, pool, []intent{lone})
	enqueuedAt := time.Now()
	waitFor(t, 30*time.Second, "the password reset sent", func() (bool, string) {
		var state string
		err := pool.QueryRow(ctx, `SELECT state FROM sendonce_outbox WHERE idempotency_key = $1`, lone.Key).Scan(&state)
		return err == nil && state == "sent", state
	})
	lonely := time.Since(enqueuedAt)
	if lonely > 2*time.Second {
		t.Errorf("the password reset took %s to be sent behind the run, want at most 2 s", lonely.Round(time.Millisecond))
	}

	waitFor(t, time.Minute, "60% of the run sent", func() (bool, string) { s := sent(); return s >= n*60/100, fmt.Sprint(s) })
	cancel := mustRun(t, "cancel", e, nil, "run", "cancel", run, "--json")
	waitFor(t, 30*time.Second, "nothing left to send", func() (bool, string) {
		c, _ := runCounts(ctx, pool, run)
		return c["sending"] == 0 && c["pending"] == 0, c.String()
	})
	for _, w := range workers {
		w.stop(t)
	}

	final, err := runCounts(ctx, pool, run)
	if err != nil {
		t.Fatal(err)
	}
	if final["sent"]+final["canceled"] != n || final["failed"] != 0 {
		t.Errorf("members at the end %s: sent + canceled must be all %d, none failed", final, n)
	}
	if final["canceled"] == 0 {
		t.Errorf("the cancel at 60%% canceled nothing (%s): it came after the run had ended, and proved nothing", final)
	}
	if !strings.Contains(cancel.stdout, fmt.Sprintf(`"canceled": %d`, final["canceled"])) {
		t.Errorf("cancel said %s; the run holds %d canceled members", strings.TrimSpace(cancel.stdout), final["canceled"])
	}
	// No canceled member reached the API, and nothing went twice.
	canceled := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT payload->'to'->>0 FROM sendonce_outbox WHERE run_key = $1 AND state = 'canceled'`, run)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var to string
		if err := rows.Scan(&to); err != nil {
			t.Fatal(err)
		}
		canceled[to] = true
	}
	rows.Close()
	perTo := map[string]int{}
	for _, d := range srv.Deliveries() {
		for _, to := range d.To {
			perTo[bareAddress(to)]++
			if canceled[bareAddress(to)] {
				t.Errorf("canceled member %s was delivered", to)
			}
		}
	}
	dups := 0
	for _, c := range perTo {
		dups += c - 1
	}
	if dups != 0 || len(srv.Deliveries()) != final["sent"]+1 {
		t.Errorf("%d deliveries with %d duplicates for %d members sent and the password reset", len(srv.Deliveries()), dups, final["sent"])
	}
	summary(t, "runs: seed=%d members=%d sent=%d canceled=%d paused_at=%d password_reset=%s deliveries=%d duplicates=%d requests=%d elapsed=%s",
		suite.seed, n, final["sent"], final["canceled"], atPause, lonely.Round(time.Millisecond), len(srv.Deliveries()), dups,
		len(srv.Requests()), time.Since(start).Round(time.Second))
}

// TestRecurringSchedule ticks a schedule every second for 30 s under two
// workers, one of them SIGKILLed twice: every occurrence makes at most one
// run, every run exactly one intent per member, and the fake delivers each
// once.
func TestRecurringSchedule(t *testing.T) {
	setup(t)
	start := time.Now()
	ctx := context.Background()
	srv := newFake(t, "schedule")
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "schedule")
	e := processEnv(dbURL, srv)
	const users = 5
	if _, err := pool.Exec(ctx, `CREATE TABLE app_user (id int PRIMARY KEY, email text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO app_user SELECT i, 'reader' || i || '@example.com' FROM generate_series(1, $1) i`, users); err != nil {
		t.Fatal(err)
	}
	stmt := filepath.Join(t.TempDir(), "digest.sql")
	if err := os.WriteFile(stmt, []byte(`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
		SELECT $1 || ':' || u.id, 'email',
			jsonb_build_object('from', 'news@example.com', 'to', jsonb_build_array(u.email),
				'subject', 'Digest ' || $1, 'text', 'Hello'),
			$1
		FROM app_user u`), 0o600); err != nil {
		t.Fatal(err)
	}
	workers := []*proc{startWorker(t, "worker0.0", e, workerOptions{}), startWorker(t, "worker1", e, workerOptions{})}
	mustRun(t, "schedule-add", e, nil, "schedule", "add", "digest", "--spec", "* * * * * *", "--sql-file", stmt)
	ticking := time.Now()

	runsSoFar := func() int {
		var k int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_run WHERE schedule_name = 'digest'`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	for kill := 1; kill <= 2; kill++ {
		want := kill * 10
		waitFor(t, time.Minute, fmt.Sprintf("%d runs", want), func() (bool, string) { k := runsSoFar(); return k >= want, fmt.Sprint(k) })
		workers[0].kill()
		workers[0] = startWorker(t, fmt.Sprintf("worker0.%d", kill), e, workerOptions{})
	}
	waitFor(t, time.Minute, "30 s of occurrences", func() (bool, string) {
		return time.Since(ticking) >= 30*time.Second, time.Since(ticking).String()
	})
	mustRun(t, "schedule-remove", e, nil, "schedule", "remove", "digest")
	runs := runsSoFar()
	waitAllSent(t, pool, runs*users, time.Minute, nil)
	for _, w := range workers {
		w.stop(t)
	}

	// Every run has one intent per member; every occurrence at most one run.
	var badRuns, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n <> $1), count(DISTINCT occurrence) FROM (
			SELECT r.key, r.occurrence, count(o.id) AS n FROM sendonce_run r LEFT JOIN sendonce_outbox o ON o.run_key = r.key
			WHERE r.schedule_name = 'digest' GROUP BY r.key, r.occurrence) x`, users).Scan(&badRuns, &distinct); err != nil {
		t.Fatal(err)
	}
	if badRuns != 0 || distinct != runs {
		t.Errorf("%d runs without exactly %d members; %d distinct occurrences for %d runs", badRuns, users, distinct, runs)
	}
	if runs < 25 {
		t.Errorf("%d runs in 30 s of a schedule ticking every second, want about 30", runs)
	}
	perKey := map[string]int{}
	for _, d := range srv.Deliveries() {
		perKey[d.Subject+"|"+strings.Join(d.To, ",")]++
	}
	dups := 0
	for _, c := range perKey {
		dups += c - 1
	}
	if dups != 0 || len(srv.Deliveries()) != runs*users {
		t.Errorf("%d deliveries (%d duplicates) for %d runs of %d members", len(srv.Deliveries()), dups, runs, users)
	}
	summary(t, "schedule: seed=%d runs=%d members_per_run=%d kills=2 deliveries=%d duplicates=%d elapsed=%s",
		suite.seed, runs, users, len(srv.Deliveries()), dups, time.Since(start).Round(time.Second))
}
