package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// perIntentVersion is the newest sendonce migration of the last release
// whose Enqueue gave every intent a River job of its own (kind
// sendonce_send, job_id on the row), and perIntentCommit that release's
// commit. Since migration 25 Enqueue writes the row only, and the workers'
// drains claim it.
const (
	perIntentVersion = 24
	perIntentCommit  = "2d6ce5c44bac68bf12533562bf2ac23d8e0e1aa9"
)

// TestUpgradeFromPerIntentJobs upgrades a database of the last release of
// per-intent River jobs (issue 44). The release's own binary enqueues
// intents, each with its job, and its worker sends some and is killed
// (SIGKILL) with others in every state a job can be left in: sending,
// their request in flight at the fake API (some not handled yet, some
// delivered with the answer not yet sent back); retrying after 503s;
// pending and due, alone and as a run's members, and scheduled a few
// seconds ahead, enqueued once it is dead. The database is migrated to the
// newest version with those jobs in it, intents are enqueued with this
// code's Enqueue (no job of their own), and this code's worker is started:
// every intent is delivered exactly once, the cut-off ones replayed under
// their key, every row is sent with the delivered message's id, and the
// intents enqueued after the upgrade are sent by the drain with no River
// job. The killed worker's jobs, left running, are then run again as
// River's rescuer would, and send nothing.
func TestUpgradeFromPerIntentJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a release: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.CreateDB(t, pgtest.ServerURL(t), "upgrade_per_intent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// UpTo applies all of River's migrations (the release pins the same
	// River, v0.51.2) and sendonce's up to the release's.
	if err := migrations.UpTo(ctx, pool, perIntentVersion); err != nil {
		t.Fatalf("migrate to version %d: %v", perIntentVersion, err)
	}

	faults, err := fakeapi.ParseFaults(strings.Join([]string{
		// Each retrying intent is refused thrice, then taken.
		"error_before=503:times=3:to=retrying-",
		// The first request of each is held until its client is gone:
		// in flight, not handled, when the release's worker is killed.
		"latency=60s:times=1:to=inflight-",
		// The first request of each is handled (delivered, its key
		// stored), its answer held: the answer is lost in the crash.
		"latency_after=60s:times=1:to=answerlost-",
	}, ","))
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: faults})

	start := time.Now()
	old := startRelease(t, ctx, pool, fake.URL(), perIntentCommit,
		"--lease", "2s", "--max-retries", "0", "--concurrency", "10")
	if old == nil {
		t.Skipf("the release's commit %s is not in this checkout's git history: nothing to build the release from", perIntentCommit)
	}
	t.Logf("built and started the release's worker (%s) in %s", perIntentCommit[:7], time.Since(start).Round(time.Millisecond))

	payload := func(key, to string) string {
		if to == "" {
			to = strings.ReplaceAll(key, ":", "-")
		}
		return fmt.Sprintf(`{"from":"billing@example.com","to":["%s@example.com"],"subject":"Invoice","text":"x"}`, to)
	}
	var keys []string // every intent, each to be delivered once
	enqueue := func(key, sendAt string) {
		t.Helper()
		args := []string{"enqueue", "--key", key, "--file", "-"}
		if sendAt != "" {
			args = append(args, "--send-at", sendAt)
		}
		old.run(t, ctx, payload(key, ""), args...)
		keys = append(keys, key)
	}
	enqueueRun := func(run string, members map[string]string) {
		t.Helper()
		var ndjson strings.Builder
		for key, to := range members {
			fmt.Fprintf(&ndjson, `{"key":%q,"payload":%s}`+"\n", key, payload(key, to))
			keys = append(keys, key)
		}
		old.run(t, ctx, ndjson.String(), "enqueue", "--run", run, "--file", "-")
	}

	// With the release's worker running: intents it sends, retries, and
	// has in flight when it dies; a run with a member it sends and one in
	// flight.
	for i := 1; i <= 3; i++ {
		enqueue(fmt.Sprintf("early:%d", i), "")
	}
	for i := 1; i <= 2; i++ {
		enqueue(fmt.Sprintf("retrying:%d", i), "")
		enqueue(fmt.Sprintf("inflight:%d", i), "")
		enqueue(fmt.Sprintf("answerlost:%d", i), "")
	}
	enqueueRun("run:live", map[string]string{"live:sent": "live-sent", "live:inflight": "inflight-live"})

	deliveredBefore := []string{"early:1", "early:2", "early:3", "live:sent", "answerlost:1", "answerlost:2"}
	if err := fake.WaitDeliveries(ctx, len(deliveredBefore)); err != nil {
		t.Fatalf("the release's first sends: %v", err)
	}
	inFlight := []string{"inflight:1", "inflight:2", "live:inflight", "answerlost:1", "answerlost:2"}
	// Nothing signals a request held by a fault, nor a River job's
	// retry, nor the completion of a sent intent's job (River records it
	// a moment after the send): poll the fake's request log and the jobs.
	// The retrying jobs must be waiting for their retry, not about to run
	// it, when the worker dies. (River makes a job whose retry is a few
	// seconds away available at once, scheduled_at ahead, rather than
	// retryable.)
	var why string
	defer func() {
		if t.Failed() && why != "" {
			t.Logf("last seen before the kill: %s", why)
		}
	}()
	await(t, "the release's sends in flight, its retries waiting and its sent jobs completed", func() bool {
		open := map[string]bool{}
		for _, r := range fake.Requests() {
			if r.AnsweredAt.IsZero() {
				open[r.IdempotencyKey] = true
			}
		}
		for _, k := range inFlight {
			if !open[k] {
				why = fmt.Sprintf("no request of %s in flight (open: %v)", k, open)
				return false
			}
		}
		var waiting, completed int
		if err := pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE o.idempotency_key LIKE 'retrying:%' AND o.state = 'pending' AND j.attempt >= 1
				AND j.state IN ('available', 'retryable') AND j.scheduled_at > now() + interval '300 milliseconds'),
			count(*) FILTER (WHERE o.state = 'sent' AND j.state = 'completed')
			FROM sendonce_outbox o JOIN river_job j ON j.id = o.job_id`).Scan(&waiting, &completed); err != nil {
			t.Fatal(err)
		}
		why = fmt.Sprintf("%d retrying jobs waiting, %d sent intents' jobs completed: %v", waiting, completed, rowJobStates(t, ctx, pool))
		return waiting == 2 && completed == 4
	})
	old.kill(t)
	got := deliveryCounts(fake)
	for _, k := range deliveredBefore {
		if got[k] != 1 {
			t.Fatalf("before the kill, %s was delivered %d times, want once", k, got[k])
		}
	}

	// Once it is dead, the release enqueues more: due, scheduled, and a
	// run's members, each with its job.
	for i := 1; i <= 3; i++ {
		enqueue(fmt.Sprintf("pending:%d", i), "")
	}
	sendAt := time.Now().Add(4 * time.Second).UTC().Format(time.RFC3339Nano)
	for i := 1; i <= 2; i++ {
		enqueue(fmt.Sprintf("scheduled:%d", i), sendAt)
	}
	enqueueRun("run:after", map[string]string{"member:1": "", "member:2": "", "member:3": ""})

	// What the release left: every intent with a job of its own, in the
	// state its situation gives it.
	want := map[string]string{
		"early:": "sent/completed", "live:sent": "sent/completed",
		"inflight:": "sending/running", "live:inflight": "sending/running", "answerlost:": "sending/running",
		"retrying:": "pending/available|pending/retryable", "pending:": "pending/available", "member:": "pending/available",
		"scheduled:": "pending/scheduled",
	}
	left := rowJobStates(t, ctx, pool)
	var leftRunning []int64
	for _, k := range keys {
		s, ok := left[k]
		if !ok {
			t.Fatalf("the release left no row with a job for %s", k)
		}
		for prefix, w := range want {
			if strings.HasPrefix(k, prefix) && !slices.Contains(strings.Split(w, "|"), s.state) {
				t.Errorf("the release left %s %s (job %d), want %s", k, s.state, s.job, w)
			}
		}
		if strings.HasSuffix(s.state, "/running") {
			leftRunning = append(leftRunning, s.job)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The upgrade, with those jobs in the database.
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("migrate to the newest version: %v", err)
	}
	t.Logf("applied River migrations %v and sendonce migrations %v over %d intents with jobs of their own",
		res.River, res.Sendonce, len(keys))
	if len(res.Sendonce) == 0 || res.Sendonce[0] != perIntentVersion+1 {
		t.Fatalf("Up applied sendonce migrations %v, want from %d on", res.Sendonce, perIntentVersion+1)
	}
	var lastJob int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&lastJob); err != nil {
		t.Fatal(err)
	}

	// This code's Enqueue, after the upgrade: rows only.
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var after []string
	for i := 1; i <= 3; i++ {
		key := fmt.Sprintf("after:%d", i)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: json.RawMessage(payload(key, ""))})
			return err
		})
		if err != nil {
			t.Fatalf("Enqueue %s after the upgrade: %v", key, err)
		}
		after = append(after, key)
	}
	keys = append(keys, after...)

	// This code's worker, against the same fake API.
	var sent, replayed, skipped atomic.Int64
	outcome := make(chan struct{}, 1)
	obs := worker.ObserverFunc(func(o worker.Outcome) {
		switch o.Result {
		case worker.ResultSent:
			sent.Add(1)
		case worker.ResultReplayed:
			replayed.Add(1)
		case worker.ResultSkipped:
			skipped.Add(1)
		default:
			return
		}
		select {
		case outcome <- struct{}{}:
		default:
		}
	})
	c, err := client.New(client.WithAPIKey(upgradeAPIKey), client.WithBaseURL(fake.URL()), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("this code's worker logged:\n%s", logs)
		}
	})
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 5, SweepInterval: 200 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond, RestartGrace: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Send: worker.SendConfig{Observer: obs}})
	if err != nil {
		t.Fatalf("this code's worker on the upgraded database: %v", err)
	}
	upgraded := time.Now()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	// Every intent settled: the outcomes say when to look.
	settle := func(what string, done func() bool) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for !done() {
			select {
			case <-outcome:
			case <-time.After(time.Second): // a record may land just after its outcome
			case <-deadline:
				t.Fatalf("timed out waiting for %s (%d sent, %d replayed, %d skipped; rows %v)",
					what, sent.Load(), replayed.Load(), skipped.Load(), rowJobStates(t, ctx, pool))
			}
		}
	}
	unsettled := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE state IN ('pending', 'sending')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	settle("every intent settled", func() bool { return unsettled() == 0 })
	t.Logf("every intent settled %s after this code's worker started (%d sent, %d replayed)",
		time.Since(upgraded).Round(time.Millisecond), sent.Load(), replayed.Load())

	// The release's jobs that the kill left running are run again, as
	// River's rescuer would once RescueAfter passed (minutes), with the
	// error it records: their intents are other jobs' now, so they send
	// nothing.
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'available', scheduled_at = now(),
			errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt,
				'error', 'Stuck job rescued by JobRescuer', 'trace', ''))
		WHERE id = ANY($1) AND state = 'running'`, leftRunning)
	settle("the killed worker's jobs run again", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'sendonce_send'
			AND state IN ('available', 'running', 'retryable', 'scheduled')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if n := skipped.Load(); n != int64(len(leftRunning)) {
		t.Errorf("the %d jobs the kill left running, run again, skipped %d times: want each to find its intent sent", len(leftRunning), n)
	}
	if strings.Contains(logs.String(), "run again by hand") {
		t.Errorf("a job rescued after the crash was taken for a retry by hand")
	}

	// Exactly once: each key delivered once, before or after the
	// upgrade, and nothing else.
	got = deliveryCounts(fake)
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("intent %s delivered %d times, want once", k, got[k])
		}
	}
	if len(got) != len(keys) {
		t.Errorf("%d keys delivered, want %d: %v", len(got), len(keys), got)
	}
	// The ones whose answer was lost were sent again and replayed by the
	// API, not delivered again.
	for _, r := range fake.Requests() {
		if strings.HasPrefix(r.IdempotencyKey, "answerlost:") && r.Status == 200 && !r.Replayed {
			t.Errorf("intent %s: a request after the crash was answered 200 without a replay", r.IdempotencyKey)
		}
	}
	if replayed.Load() < 2 {
		t.Errorf("this code's worker saw %d replays, want the 2 intents whose answer was lost", replayed.Load())
	}

	// Every row sent, with the message the fake delivered for it.
	messages := map[string]string{}
	for _, d := range fake.Deliveries() {
		messages[d.IdempotencyKey] = d.MessageID
	}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, coalesce(message_id, ''), job_id FROM sendonce_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	nrows := 0
	for rows.Next() {
		var key, state, msg string
		var job *int64
		if err := rows.Scan(&key, &state, &msg, &job); err != nil {
			t.Fatal(err)
		}
		nrows++
		if state != "sent" || msg != messages[key] {
			t.Errorf("intent %s: %s with message %q, want sent with %q", key, state, msg, messages[key])
		}
		if slices.Contains(after, key) && job != nil {
			t.Errorf("intent %s, enqueued after the upgrade, has River job %d", key, *job)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if nrows != len(keys) {
		t.Errorf("%d rows, want %d", nrows, len(keys))
	}

	// The jobs made after the upgrade: none for the intents enqueued
	// after it; only the intents the killed worker left sending under its
	// lease got new ones, from RescueAbandoned once that lease lapsed.
	var rescued []string
	jr, err := pool.Query(ctx, `SELECT coalesce(args->>'key', '') FROM river_job WHERE kind = 'sendonce_send' AND id > $1 ORDER BY 1`, lastJob)
	if err != nil {
		t.Fatal(err)
	}
	rescued, err = pgx.CollectRows(jr, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("send jobs made after the upgrade: %v", rescued)
	for _, k := range rescued {
		if !slices.Contains(inFlight, k) {
			t.Errorf("intent %s got a new River job after the upgrade; only the ones left sending by the killed worker need one", k)
		}
	}
	for _, run := range []string{"run:live", "run:after"} {
		st, err := ob.RunStatus(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Done() || st.Counts[outbox.StateSent] != st.Total {
			t.Errorf("run %s after the upgrade: %v of %d, want all sent", run, st.Counts, st.Total)
		}
	}
}

// deliveryCounts counts the fake's deliveries by idempotency key.
func deliveryCounts(fake *fakeapi.Server) map[string]int {
	n := map[string]int{}
	for _, d := range fake.Deliveries() {
		n[d.IdempotencyKey]++
	}
	return n
}

// rowJob is an intent's state and its River job's ("sent/completed"), and
// the job's id.
type rowJob struct {
	state string
	job   int64
}

// rowJobStates reads every intent's state and its job's, by key.
func rowJobStates(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]rowJob {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT o.idempotency_key, o.state || '/' || coalesce(j.state::text, 'none'), coalesce(o.job_id, 0)
		FROM sendonce_outbox o LEFT JOIN river_job j ON j.id = o.job_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rowJob{}
	var key string
	var s rowJob
	if _, err := pgx.ForEachRow(rows, []any{&key, &s.state, &s.job}, func() error {
		out[key] = s
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
