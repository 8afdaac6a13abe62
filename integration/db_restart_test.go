package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestDBRestart stops PostgreSQL hard (immediate shutdown: no checkpoint,
// connections cut) while two workers drain the outbox, and starts it again
// on the same port. The same worker processes must reconnect by themselves
// and finish the work, sending nothing twice and losing nothing, and must
// pick up intents enqueued after the restarts, through River and through
// the sweeper (whose LISTEN connection the crash cut). It runs twice: every
// intent sent alone, and with --coalesce 100, where a batch whose answer a
// crash kept from being recorded is sent again whole and replayed.
func TestDBRestart(t *testing.T) { variants(t, dbRestart) }

func dbRestart(t *testing.T, v variant) {
	coalesce := v.Coalesce
	setup(t)
	needCoalesce(t, v)
	start := time.Now()
	name := variantName("db-restart", v)
	rng := rngFor(name)
	n := 200 * suite.scale
	crashes := 2 * suite.scale
	late := 20 // enqueued after the last restart, half by SQL, half by Go

	// A cluster of its own, since this scenario crashes it. Durable: with
	// fsync and synchronous commit off, a crash would lose commits the
	// workers were told had happened, and the scenario would be testing
	// PostgreSQL's settings instead of sendonce.
	cluster := pgtest.NewCluster(t, pgcluster.Options{Durable: true, Logf: t.Logf})
	srv := newFake(t, name, mustFaults(t, "latency=150ms;method=POST")...)
	label, prefix := "dbrestart", fmt.Sprintf("dbr-%d", suite.seed)
	if coalesce > 0 {
		label, prefix = "dbrestart_co", fmt.Sprintf("dbrco-%d", suite.seed)
	}
	if v.PollOnly {
		label, prefix = label+"_poll", fmt.Sprintf("dbrpoll-%d", suite.seed)
	}
	if v.Pooler != "" {
		label, prefix = label+"_"+v.poolerTag(), prefix+"-"+v.poolerTag()
	}
	dbURL, pool := newDatabase(t, cluster.URL, label)
	e, producers := v.route(t, dbURL, pool, srv)

	intents := makeIntents(rng, prefix, n+late)
	early, lateIntents := intents[:n], intents[n:]
	enqueueGo(t, producers, early)
	recipients := 0
	for _, in := range early {
		recipients += len(in.Recipients)
	}

	opts := workerOptions{Concurrency: 4, JobTimeout: 2 * time.Second, RescueAfter: 3 * time.Second}
	if coalesce > 0 {
		opts.Concurrency, opts.Coalesce = 50, coalesce
	}
	opts.PollOnly = v.PollOnly
	workers := []*proc{startWorker(t, "worker0", e, opts), startWorker(t, "worker1", e, opts)}
	pids := []int{workers[0].pid(), workers[1].pid()}

	ctx := context.Background()
	var downs []string
	for k := range crashes {
		// Crash at an event (a share of the deliveries made), stay down for
		// a drawn while: the outage's length is the random part.
		threshold := recipients * (k + 1) / (crashes + 2)
		waitFor(t, 60*time.Second, fmt.Sprintf("crash %d: %d deliveries", k+1, threshold), func() (bool, string) {
			d := len(srv.Deliveries())
			return d >= threshold, fmt.Sprintf("%d delivered", d)
		})
		down := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		if err := cluster.Crash(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("crash %d: PostgreSQL stopped (immediate) at %d deliveries; down for %s", k+1, len(srv.Deliveries()), ms(down))
		time.Sleep(down) // the outage itself, not a synchronisation
		if err := cluster.Start(ctx); err != nil {
			t.Fatal(err)
		}
		downs = append(downs, ms(down))
		for _, w := range workers {
			if !w.running() {
				t.Fatalf("%s exited during the outage: %v\n%s", w.name, w.err, w.output())
			}
		}
	}

	// New work after the restarts: the workers must have their
	// connections, their River notifications and their sweeper back.
	// The producers ask by their own route: a pooler answers its clients'
	// first logins after the restart with an error of its own until it
	// has logged in to the server again (PgBouncer's server_login_retry).
	waitFor(t, 30*time.Second, "the database to answer again", func() (bool, string) {
		err := producers.Ping(ctx)
		return err == nil, fmt.Sprint(err)
	})
	enqueueSQL(t, producers, lateIntents[:late/2])
	enqueueGo(t, producers, lateIntents[late/2:])

	waitAllSent(t, pool, n+late, 3*time.Minute, func() string {
		return fmt.Sprintf("fake: %d delivered", len(srv.Deliveries()))
	})

	for i, w := range workers {
		if !w.running() || w.pid() != pids[i] {
			t.Errorf("%s is not the process that was running before the crashes", w.name)
		}
		w.stop(t)
	}

	l := checkExactlyOnce(t, srv, pool, intents)
	rows := outboxRows(t, pool)

	if coalesce == 0 {
		summary(t, "%s: seed=%d intents=%d crashes=%d downtime=%s workers=%d worker_restarts=0 deliveries=%d duplicates=%d lost=%d replayed=%d elapsed=%s",
			name, suite.seed, n+late, crashes, strings.Join(downs, "/"), len(workers), l.Deliveries, l.Duplicates, l.Lost,
			countReplayed(rows), time.Since(start).Round(time.Second))
		return
	}
	// Crashes cut off batches' records only when one is in flight then, so
	// a replayed batch is counted, not required; each must be whole.
	cs := checkCoalesced(t, srv, rows, l.Batches)
	summary(t, "%s: seed=%d intents=%d coalesce=%d concurrency=%d crashes=%d downtime=%s workers=%d worker_restarts=0 deliveries=%d duplicates=%d lost=%d replayed=%d %s requests=%d elapsed=%s",
		name, suite.seed, n+late, coalesce, opts.Concurrency, crashes, strings.Join(downs, "/"), len(workers), l.Deliveries, l.Duplicates, l.Lost,
		countReplayed(rows), cs, len(srv.Requests()), time.Since(start).Round(time.Second))
}
