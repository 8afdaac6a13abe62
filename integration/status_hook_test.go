package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestGoStatusHookThroughKills: an application that embeds the worker with
// a Go status hook (worker.Config.OnStatus, in integration/testdata/
// hookworker) keeps its table equal to the committed transitions while its
// processes are SIGKILLed in the middle of sends: every intent sent once
// at the API and told to the hook once, the sends the kills cut off
// replayed under their keys and told once, nothing told that did not
// commit.
func TestGoStatusHookThroughKills(t *testing.T) {
	setup(t)
	ctx := context.Background()
	name := "go-status-hook"
	rng := rngFor(name)
	const hold = 300 * time.Millisecond // the window: delivered, not yet answered
	srv := newFake(t, name, mustFaults(t, fmt.Sprintf("latency_after=%s;method=POST", hold))...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "gohook")
	if _, err := pool.Exec(ctx, `CREATE TABLE app_emailed (seq bigserial PRIMARY KEY, key text NOT NULL, transition text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(suite.dir, "hookworker")
	build := exec.Command("go", "build", "-o", bin, "./integration/testdata/hookworker")
	build.Dir = suite.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build hookworker: %v\n%s", err, out)
	}

	n := 150 * suite.scale
	prefix := fmt.Sprintf("gohook-%d", suite.seed)
	var intents []intent
	for i := range n {
		intents = append(intents, emailIntent(fmt.Sprintf("%s:%04d", prefix, i), fmt.Sprintf("%s-%04d@example.test", prefix, i)))
	}
	enqueueSQL(t, pool, intents)

	e := processEnv(dbURL, srv)
	workers := make([]*proc, 2)
	generation := 0
	start := func(i int) {
		workers[i] = startBinary(t, bin, fmt.Sprintf("hookworker%d.%d", i, generation), e)
	}
	for i := range workers {
		start(i)
	}
	killedMidSend := 0
	for k, at := range []int{n / 5, n / 2, n * 4 / 5} {
		pendingAtKill := 0
		waitFor(t, 60*time.Second, fmt.Sprintf("kill %d: %d deliveries with one still unanswered", k+1, at), func() (bool, string) {
			delivered, pending := deliveryWindow(srv)
			pendingAtKill = pending
			return (delivered >= at && pending > 0) || delivered >= n, fmt.Sprintf("%d delivered, %d unanswered", delivered, pending)
		})
		victim := rng.IntN(len(workers))
		workers[victim].kill()
		if pendingAtKill > 0 {
			killedMidSend++
		}
		generation++
		start(victim)
	}
	waitFor(t, 2*time.Minute, "every intent sent", func() (bool, string) {
		var sent int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`).Scan(&sent); err != nil {
			return false, err.Error()
		}
		return sent == n, fmt.Sprintf("%d of %d sent", sent, n)
	})
	for _, w := range workers {
		w.stop(t)
	}

	perKey := map[string]int{}
	for _, d := range srv.Deliveries() {
		perKey[d.IdempotencyKey]++
	}
	for _, in := range intents {
		if perKey[in.Key] != 1 {
			t.Errorf("%s delivered %d times, want 1", in.Key, perKey[in.Key])
		}
	}
	rows, err := pool.Query(ctx, `SELECT o.idempotency_key, count(a.seq) FILTER (WHERE a.transition = 'sent'), count(a.seq) FILTER (WHERE a.transition <> 'sent'), o.replayed
		FROM sendonce_outbox o LEFT JOIN app_emailed a ON a.key = o.idempotency_key GROUP BY o.idempotency_key, o.replayed`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var bad []string
	replayed, keys := 0, 0
	for rows.Next() {
		var key string
		var sent, other int
		var rep bool
		if err := rows.Scan(&key, &sent, &other, &rep); err != nil {
			t.Fatal(err)
		}
		keys++
		if rep {
			replayed++
		}
		if sent != 1 || other != 0 {
			bad = append(bad, fmt.Sprintf("%s: told sent %d times and of %d other transitions", key, sent, other))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if keys != n || len(bad) > 0 {
		t.Fatalf("%d intents; the application's table is not the committed transitions:\n%s", keys, strings.Join(bad, "\n"))
	}
	var told int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM app_emailed`).Scan(&told); err != nil || told != n {
		t.Fatalf("%d rows in the application's table (%v), want %d", told, err, n)
	}
	if killedMidSend > 0 && replayed == 0 {
		t.Fatalf("%d kills cut off a send, but no intent was replayed", killedMidSend)
	}
	fmt.Fprintf(os.Stderr, "integration: go-status-hook: %d intents, %d kills (%d mid-send), %d replayed, %d told once each\n",
		n, 3, killedMidSend, replayed, told)
}
