package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestWorkSurvivesPostgresRestart crashes the database under a running
// worker: /readyz turns 503 while it is down, and once it is back the
// worker, without a restart of its own, sends what was enqueued since.
func TestWorkSurvivesPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster of its own")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Durable: with synchronous_commit off, a crash could lose the first
	// intent's committed "sent" and leave it for the rescuer.
	cluster := pgtest.NewCluster(t, pgcluster.Options{Durable: true})

	fake := fakeapi.NewTest(t, fakeapi.Config{})
	env := workEnv(cluster.URL, fake)
	wantOK(t, sendonce(t, env, "", "migrate"))
	pool := poolFor(t, cluster.URL)
	sent := func(n int) func() bool {
		return func() bool {
			var got int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`).Scan(&got)
			if err != nil {
				t.Logf("count sent: %v", err)
			}
			return err == nil && got == n
		}
	}

	wantOK(t, sendonce(t, env, emailBody("before@example.com"), "enqueue", "--key", "restart:1"))
	w := startWork(t, env, fastArgs...)
	eventually(t, 30*time.Second, "the first intent sent", sent(1))

	if err := cluster.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "/readyz to report the database down", func() bool {
		code, body, _ := w.get("/readyz")
		return code == 503 && strings.HasPrefix(body, "database unreachable")
	})
	if code, _, _ := w.get("/healthz"); code != 200 {
		t.Errorf("/healthz while the database is down: %d", code)
	}
	// Metrics still scrape, without the outbox gauges.
	if code, body, _ := w.get("/metrics"); code != 200 || strings.Contains(body, "sendonce_outbox_intents{") {
		t.Errorf("/metrics while the database is down: %d, outbox gauges present: %v", code, strings.Contains(body, "sendonce_outbox_intents{"))
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "/readyz to recover", func() bool {
		code, _, _ := w.get("/readyz")
		return code == 200
	})
	wantOK(t, sendonce(t, env, emailBody("after@example.com"), "enqueue", "--key", "restart:2"))
	eventually(t, 60*time.Second, "the second intent sent after the restart", sent(2))
	if n := len(fake.Deliveries()); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}

	wantOK(t, w.stop())
}
