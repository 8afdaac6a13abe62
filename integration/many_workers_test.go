package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/pgtest"
)

// TestManyWorkers runs three worker processes on one outbox and checks that
// they shared the work, sent nothing twice and left nothing behind. Intents
// arrive both through the Go API (with a River job) and by plain SQL (which
// the three sweepers race to schedule).
func TestManyWorkers(t *testing.T) {
	setup(t)
	start := time.Now()
	rng := rngFor("many-workers")
	n := 150 * suite.scale
	const nWorkers = 3

	// A little latency before each send keeps every worker busy, so no
	// one of them drains the outbox alone.
	srv := newFake(t, "many-workers", mustFaults(t, "latency=60ms;method=POST")...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "many")
	e := processEnv(dbURL, srv)

	workers := make([]*proc, nWorkers)
	clientIDs := map[string]int{} // River client id → worker index
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d", i), e, workerOptions{Concurrency: 4})
	}
	for i, w := range workers {
		clientIDs[w.riverClientID(t, 30*time.Second)] = i
	}
	if len(clientIDs) != nWorkers {
		t.Fatalf("%d workers reported %d distinct River client ids", nWorkers, len(clientIDs))
	}

	intents := makeIntents(rng, fmt.Sprintf("many-%d", suite.seed), n)
	for wave := range 3 {
		part := intents[wave*n/3 : (wave+1)*n/3]
		half := len(part) / 2
		enqueueSQL(t, pool, part[:half])
		enqueueGo(t, pool, part[half:])
	}
	waitAllSent(t, pool, n, 2*time.Minute, nil)

	// Who sent what, two ways: River's attempted_by on each job, and each
	// process's own "sent" log lines.
	ctx := context.Background()
	byRiver := make([]int, nWorkers)
	rows, err := pool.Query(ctx, `SELECT attempted_by[array_length(attempted_by, 1)], count(*) FROM river_job WHERE state = 'completed' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	jobs := 0
	for rows.Next() {
		var id string
		var count int
		if err := rows.Scan(&id, &count); err != nil {
			t.Fatal(err)
		}
		i, ok := clientIDs[id]
		if !ok {
			t.Errorf("%d jobs completed by River client %q, which is none of the workers", count, id)
			continue
		}
		byRiver[i] += count
		jobs += count
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if jobs != n {
		t.Errorf("%d completed River jobs for %d intents: some intent was scheduled twice", jobs, n)
	}

	for _, w := range workers {
		w.stop(t)
	}

	byLog := make([]int, nWorkers)
	sentBy := map[string]string{}
	for i, w := range workers {
		for _, l := range w.logLines() {
			if l["msg"] != "sent" {
				continue
			}
			key, _ := l["key"].(string)
			byLog[i]++
			if other, dup := sentBy[key]; dup {
				t.Errorf("intent %s sent by both %s and %s", key, other, w.name)
			}
			sentBy[key] = w.name
		}
	}
	logsUsable := len(sentBy) > 0
	if logsUsable && len(sentBy) != n {
		t.Errorf("the workers' logs report %d intents sent, want %d", len(sentBy), n)
	}
	for i, w := range workers {
		if byRiver[i] == 0 {
			t.Errorf("%s completed no River job: the work was not spread (by River: %v)", w.name, byRiver)
		}
		if logsUsable && byLog[i] == 0 {
			t.Errorf("%s logged no send: the work was not spread (by logs: %v)", w.name, byLog)
		}
	}
	if !logsUsable {
		t.Logf("the workers log no \"sent\" line with a key at info level; attribution by River's attempted_by only")
	}

	// No intent was even attempted twice: each was claimed once.
	for key, r := range outboxRows(t, pool) {
		if r.Attempts != 1 {
			t.Errorf("intent %s: %d attempts, want 1 (no faults, no crashes)", key, r.Attempts)
		}
	}
	l := checkExactlyOnce(t, srv, intents)

	summary(t, "many-workers: seed=%d intents=%d workers=%d sent_by_river=%s sent_by_logs=%s jobs=%d deliveries=%d duplicates=%d lost=%d elapsed=%s",
		suite.seed, n, nWorkers, ints(byRiver), ints(byLog), jobs, l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "/")
}
