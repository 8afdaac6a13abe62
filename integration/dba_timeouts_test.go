package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestDBATimeouts (issue 24, item 4) runs two workers with the command's
// default flags in a database whose DBA set idle_session_timeout,
// idle_in_transaction_session_timeout and statement_timeout to 5 s (ALTER
// DATABASE: every new session takes them), with the outbox idle longer than
// that between waves of intents, so the server ends the workers' idle
// connections. No live worker may be taken for dead (false rescues: the
// sweepers' rescues and ended leases, while no worker died, must be 0),
// nothing may be lost or sent twice, and pruning the sent intents
// (`sendonce prune`) and the workers' reconciliation work under the
// statement timeout, in pieces.
func TestDBATimeouts(t *testing.T) {
	setup(t)
	start := time.Now()
	rng := rngFor("dba-timeouts")
	waves := 3
	perWave := 40 * suite.scale
	const idle = 7 * time.Second // longer than idle_session_timeout

	srv := newFake(t, "dba-timeouts", mustFaults(t, "latency=100ms;method=POST")...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "dba")
	ctx := context.Background()
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"idle_session_timeout", "idle_in_transaction_session_timeout", "statement_timeout"} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q SET %s = '5s'`, db, s)); err != nil {
			t.Fatal(err)
		}
	}
	pool.Reset() // the test's own connections take the settings too
	var got string
	if err := pool.QueryRow(ctx, `SELECT current_setting('idle_session_timeout') || '/' || current_setting('idle_in_transaction_session_timeout') || '/' || current_setting('statement_timeout')`).Scan(&got); err != nil || got != "5s/5s/5s" {
		t.Fatalf("the DBA's settings in a new session: %q, %v", got, err)
	}
	e := processEnv(dbURL, srv)
	waitForServerUptime(t, pool)

	opts := workerOptions{Concurrency: 8, Defaults: true}
	workers := []*proc{startWorker(t, "worker0", e, opts), startWorker(t, "worker1", e, opts)}
	pids := []int{workers[0].pid(), workers[1].pid()}
	for _, w := range workers {
		w.riverClientID(t, 30*time.Second)
	}

	intents := makeIntents(rng, fmt.Sprintf("dba-%d", suite.seed), waves*perWave)
	for k := range waves {
		// The outbox idle past the server's idle timeouts: the scenario
		// itself, not a synchronisation.
		time.Sleep(idle)
		enqueueGo(t, pool, intents[k*perWave:(k+1)*perWave])
		waitAllSent(t, pool, (k+1)*perWave, 2*time.Minute, func() string {
			return fmt.Sprintf("fake: %d delivered", len(srv.Deliveries()))
		})
	}
	time.Sleep(idle)
	l := checkExactlyOnce(t, srv, pool, intents)

	// Retention under the statement timeout: every sent intent pruned, in
	// transactions of a thousand rows at most.
	pruned := mustRun(t, "prune", e, nil, "prune", "--retain", "0")
	rescues, ended, idleEnds := 0, 0, 0
	for i, w := range workers {
		if !w.running() || w.pid() != pids[i] {
			t.Errorf("%s is not the process that was running from the start", w.name)
		}
		w.stop(t)
		for _, l := range w.logLines() {
			msg, _ := l["msg"].(string)
			c, _ := l["count"].(float64)
			switch msg {
			case "sweeper: rescued intents a crashed worker left sending; they are sent again with the same key",
				"sweeper: rescued batches a crashed worker left sending; they are sent again whole, with the same key":
				rescues += int(c)
			case "sweeper: ended the leases of workers that stopped renewing them; their intents go to other jobs":
				ended += int(c)
			}
			if errText, _ := l["error"].(string); errText != "" && (strings.Contains(errText, "idle-session timeout") || strings.Contains(errText, "57P05")) {
				idleEnds++
			}
			if msg == "sweeper: reconcile failed" || msg == "sweeper: rescue failed" || msg == "sweeper: expire leases failed" {
				t.Errorf("%s: %v", w.name, l)
			}
		}
	}
	if idleEnds == 0 {
		t.Errorf("no worker logged a connection ended by idle_session_timeout: the run did not prove the workers live through it")
	}
	if rescues != 0 || ended != 0 {
		t.Errorf("false rescues of live workers: %d intents rescued, %d leases ended, while no worker died", rescues, ended)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox`).Scan(&left); err != nil || left != 0 {
		t.Errorf("after `sendonce prune --retain 0`: %d intents left (%v), want 0\n%s%s", left, err, pruned.stdout, pruned.stderr)
	}
	summary(t, "dba-timeouts: seed=%d intents=%d waves=%d idle=%s workers=%d idle_session_ends_logged=%d false_rescues=%d leases_ended=%d deliveries=%d duplicates=%d lost=%d pruned_left=%d elapsed=%s",
		suite.seed, len(intents), waves, idle, len(workers), idleEnds, rescues, ended, l.Deliveries, l.Duplicates, l.Lost, left,
		time.Since(start).Round(time.Second))
}
