package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestRunBreaker is issue 47's acceptance test of the runs' bounce-rate
// breaker, through a real `sendonce work` that takes the fake API's
// signed webhooks. A run of 2,000 intents whose every tenth address
// hard-bounces (the fake's bounce rule) pauses itself after at most its
// minimum of known outcomes (100, the default) plus 50 sends, sends none
// of the rest, and says why in `sendonce run show` and `sendonce runs`;
// the same run with every hundredth address bouncing completes; invoices
// to the same domain, enqueued throughout, are all sent and delivered.
//
// Sends are paced at 50 a second (the fake's rate limit and the worker's
// --api-rate), so that the webhooks, posted one at a time as the fake
// delivers, keep up with the sends: the outcomes known lag the sends by
// the few in flight, not by a backlog of events.
func TestRunBreaker(t *testing.T) {
	setup(t)
	ctx := context.Background()
	const n, minimum = 2000, outbox.DefaultBreakerMinOutcomes
	hookAddr := freeLoopbackAddr(t)
	srv := fakeapi.NewTest(t, fakeapi.Config{
		APIKeys:       []string{apiKey},
		Seed:          seedFor("breaker"),
		Rate:          []fakeapi.RateLimit{{Count: 50, Per: time.Second}},
		WebhookURL:    "http://" + hookAddr + "/webhooks/openemail",
		WebhookSecret: webhookSecret,
		Faults:        mustFaults(t, "bounce;to=-bounce@"),
	})
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "breaker")
	e := processEnv(dbURL, srv)
	e.Extra = append(e.Extra, "OPENEMAIL_WEBHOOK_SECRET="+webhookSecret)
	w := startProc(t, "worker", e, append(workerArgs(t, workerOptions{APIRate: "50/s"}), "--webhook-addr", hookAddr)...)
	waitFor(t, 30*time.Second, "the worker's webhook listener", func() (bool, string) {
		if !w.running() {
			t.Fatalf("the worker exited: %v\n%s", w.err, w.output())
		}
		return strings.Contains(w.stdout.String(), "webhooks=http://"+hookAddr), tail(w.stdout.String(), 300)
	})
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Invoices, transactional, to the same domain, every 100 ms until the
	// end.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var invoices []string
	stopInvoices := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopInvoices()
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			in := emailIntent(fmt.Sprintf("invoice:%d", i), fmt.Sprintf("customer%d@example.test", i))
			enqueueGo(t, pool, []intent{in})
			invoices = append(invoices, in.Key)
		}
	})

	enqueueBreakerRun := func(run string, every int) {
		ins := make([]outbox.Intent, n)
		for i := range ins {
			to := fmt.Sprintf("%s-%04d@example.test", strings.ReplaceAll(run, ":", "-"), i)
			if i%every == 0 {
				to = fmt.Sprintf("%s-%04d-bounce@example.test", strings.ReplaceAll(run, ":", "-"), i)
			}
			ins[i] = emailIntent(fmt.Sprintf("%s:%04d", run, i), to).outboxIntent()
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: run, Intents: ins})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	sentOf := func(run string) int {
		c, err := runCounts(ctx, pool, run)
		if err != nil {
			t.Fatal(err)
		}
		return c["sent"]
	}

	// 10% hard bounces: the breaker pauses the run.
	const bad = "campaign:stale"
	enqueueBreakerRun(bad, 10)
	waitFor(t, 2*time.Minute, "the stale run to pause itself", func() (bool, string) {
		st, err := ob.RunStatus(ctx, bad)
		if err != nil {
			return false, err.Error()
		}
		return st.State == outbox.RunPaused, fmt.Sprintf("%s, %d sent, breaker %+v", st.State, sentOf(bad), st.Breaker)
	})
	// What was in flight finishes (as in TestRunLifecycle): every
	// transaction older than the trip ends, then no member is sending.
	var trippedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&trippedAt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the transactions older than the trip to end", func() (bool, string) {
		var older int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start < $1`,
			trippedAt).Scan(&older)
		return err == nil && older == 0, fmt.Sprintf("%d open (err %v)", older, err)
	})
	waitFor(t, 30*time.Second, "no member of the stale run sending", func() (bool, string) {
		c, _ := runCounts(ctx, pool, bad)
		return c["sending"] == 0, c.String()
	})
	atPause := sentOf(bad)
	quiet := time.Now()
	for time.Since(quiet) < 2*time.Second { // an absence is observed over a span, not awaited
		if s := sentOf(bad); s != atPause {
			t.Fatalf("%d members of the paused run sent after the pause (from %d)", s-atPause, atPause)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := ob.RunStatus(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for _, d := range srv.Deliveries() {
		if strings.HasPrefix(d.IdempotencyKey, bad+":") {
			delivered++
		}
	}
	summary(t, "breaker: the stale run (10%% hard bounces) paused after %d sends (minimum %d), %d left unsent; %s",
		atPause, minimum, st.Counts[outbox.StatePending], st.Breaker.Reason)
	if atPause > minimum+50 || delivered != atPause || st.Counts[outbox.StatePending] != int64(n-atPause) {
		t.Errorf("the stale run paused after %d sends (the API delivered %d), %d pending; want at most %d sends, the rest pending",
			atPause, delivered, st.Counts[outbox.StatePending], minimum+50)
	}
	if !strings.HasPrefix(st.Breaker.Reason, "bounce rate ") || !strings.Contains(st.Breaker.Reason, ">= 5% threshold") {
		t.Errorf("the stale run's reason %q, want the bounce rate and its threshold", st.Breaker.Reason)
	}
	show := mustRun(t, "run show", e, nil, "run", "show", bad)
	if !strings.Contains(show.stdout, "paused by the breaker:  "+st.Breaker.Reason) {
		t.Errorf("run show of the stale run does not say why it is paused:\n%s", show.stdout)
	}
	list := mustRun(t, "runs", e, nil, "runs")
	if !strings.Contains(list.stdout, "PAUSED BY") || !strings.Contains(list.stdout, "breaker: "+st.Breaker.Reason) {
		t.Errorf("sendonce runs does not say why the stale run is paused:\n%s", list.stdout)
	}
	waitFor(t, 10*time.Second, "the trip's log line", func() (bool, string) {
		for _, l := range w.logLines() {
			if l["msg"] == "run breaker tripped: run paused" && l["run"] == bad && l["reason"] == st.Breaker.Reason {
				return true, ""
			}
		}
		return false, tail(w.stderr.String(), 300)
	})

	// 1% hard bounces: the run completes.
	const good = "campaign:fresh"
	enqueueBreakerRun(good, 100)
	waitFor(t, 2*time.Minute, "the fresh run to be sent", func() (bool, string) {
		st, err := ob.RunStatus(ctx, good)
		if err != nil {
			return false, err.Error()
		}
		return st.State == outbox.RunDone || st.State == outbox.RunPaused, fmt.Sprintf("%s, %d sent", st.State, sentOf(good))
	})
	stopInvoices()
	waitFor(t, time.Minute, "every outcome of the fresh run and of the invoices", func() (bool, string) {
		c, err := countBy(ctx, pool, `SELECT coalesce(run_key, 'invoice') || ' ' || state || ' ' || coalesce(delivery_status, 'none'), count(*)
			FROM sendonce_outbox WHERE run_key IS DISTINCT FROM 'campaign:stale' GROUP BY 1`)
		if err != nil {
			return false, err.Error()
		}
		return c[good+" sent delivered"] == n-n/100 && c[good+" sent bounced"] == n/100 &&
			c["invoice sent delivered"] == len(invoices), c.String()
	})
	if st, err := ob.RunStatus(ctx, good); err != nil || st.State != outbox.RunDone || st.Breaker.TrippedAt != nil || st.Breaker.Known != int64(n) {
		t.Errorf("the fresh run: %+v, %v; want done, %d known outcomes, never tripped", st, err, n)
	}
	summary(t, "breaker: the fresh run (1%% hard bounces) completed, %d sends; %d invoices enqueued throughout, all delivered",
		n, len(invoices))
}
