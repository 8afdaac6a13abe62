package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestManyWorkers runs three worker processes on one outbox and checks that
// they shared the work, sent nothing twice and left nothing behind. Intents
// arrive both through the Go API and by plain SQL (which the three
// sweepers race to check), all of them rows on the drain, none with a
// River job of its own. It runs twice: every intent sent alone, and with
// --coalesce 100, where each worker coalesces the email intents it sends.
func TestManyWorkers(t *testing.T) { variants(t, manyWorkers) }

func manyWorkers(t *testing.T, v variant) {
	coalesce := v.Coalesce
	setup(t)
	needCoalesce(t, v)
	start := time.Now()
	name := variantName("many-workers", v)
	rng := rngFor(name)
	n := 150 * suite.scale
	const nWorkers = 3

	// A little latency before each send keeps every worker busy, so no
	// one of them drains the outbox alone.
	srv := newFake(t, name, mustFaults(t, "latency=60ms;method=POST")...)
	label, prefix := "many", fmt.Sprintf("many-%d", suite.seed)
	if coalesce > 0 {
		label, prefix = "many_co", fmt.Sprintf("manyco-%d", suite.seed)
	}
	if v.PollOnly {
		label, prefix = label+"_poll", fmt.Sprintf("manypoll-%d", suite.seed)
	}
	if v.Pooler != "" {
		label, prefix = label+"_"+v.poolerTag(), prefix+"-"+v.poolerTag()
	}
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), label)
	e, producers := v.route(t, dbURL, pool, srv)

	opts := workerOptions{Concurrency: 4}
	if coalesce > 0 {
		opts.Concurrency, opts.Coalesce = 50, coalesce
	}
	opts.PollOnly = v.PollOnly
	workers := make([]*proc, nWorkers)
	clientIDs := map[string]int{} // River client id → worker index
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d", i), e, opts)
	}
	for i, w := range workers {
		clientIDs[w.riverClientID(t, 30*time.Second)] = i
	}
	if len(clientIDs) != nWorkers {
		t.Fatalf("%d workers reported %d distinct River client ids", nWorkers, len(clientIDs))
	}

	intents := makeIntents(rng, prefix, n)
	viaSQL := 0
	for wave := range 3 {
		part := intents[wave*n/3 : (wave+1)*n/3]
		half := len(part) / 2
		enqueueSQL(t, producers, part[:half])
		enqueueGo(t, producers, part[half:])
		viaSQL += half
	}
	waitAllSent(t, pool, n, 2*time.Minute, nil)

	// Who sent what, two ways: River's attempted_by on each job, and each
	// process's own "sent" (and "batch sent") log lines.
	ctx := context.Background()
	byRiver := make([]int, nWorkers)
	rows, err := pool.Query(ctx, `SELECT kind, attempted_by[array_length(attempted_by, 1)], count(*) FROM river_job WHERE state = 'completed' GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	jobs := 0
	jobsByKind := map[string]int{}
	for rows.Next() {
		var kind, id string
		var count int
		if err := rows.Scan(&kind, &id, &count); err != nil {
			t.Fatal(err)
		}
		i, ok := clientIDs[id]
		if !ok {
			t.Errorf("%d %s jobs completed by River client %q, which is none of the workers", count, kind, id)
			continue
		}
		byRiver[i] += count
		jobs += count
		jobsByKind[kind] += count
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// No send job: every intent, enqueued from Go or inserted by SQL, is
	// the drain's, and none was given a job of its own; one
	// batch job per frozen batch.
	b := loadBatches(t, pool)
	if got := jobsByKind["sendonce_send"]; got != 0 {
		t.Errorf("%d completed send jobs for %d intents on the drain (%d enqueued from Go, %d by SQL): some intent was given a River job (jobs by kind: %v)",
			got, n, n-viaSQL, viaSQL, jobsByKind)
	}
	var withJob int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE job_id IS NOT NULL
		AND (batch_key IS NULL OR job_id <> (SELECT b.job_id FROM sendonce_batch b WHERE b.idempotency_key = batch_key))`).Scan(&withJob); err != nil {
		t.Fatal(err)
	} else if withJob != 0 {
		t.Errorf("%d intents with a River job of their own (not their batch's), want none: the drain sends them all", withJob)
	}
	if got := jobsByKind["sendonce_batch"]; got != len(b.Frozen) {
		t.Errorf("%d completed batch jobs for %d frozen batches (jobs by kind: %v)", got, len(b.Frozen), jobsByKind)
	}
	if other := jobs - jobsByKind["sendonce_send"] - jobsByKind["sendonce_batch"]; other != 0 {
		t.Errorf("%d completed River jobs of other kinds: %v", other, jobsByKind)
	}

	for _, w := range workers {
		w.stop(t)
	}

	byLog := make([]int, nWorkers)
	sentBy := map[string]string{}
	sent := func(key string, w *proc) {
		if other, dup := sentBy[key]; dup {
			t.Errorf("intent %s sent by both %s and %s", key, other, w.name)
		}
		sentBy[key] = w.name
	}
	for i, w := range workers {
		for _, l := range w.logLines() {
			switch l["msg"] {
			case "sent":
				key, _ := l["key"].(string)
				byLog[i]++
				sent(key, w)
			case "batch sent":
				key, _ := l["batch"].(string)
				members := b.memberList(key)
				if got, _ := l["sent"].(float64); int(got) != len(members) {
					t.Errorf("%s logged batch %s sent with %v members sent, the outbox names %d members", w.name, key, l["sent"], len(members))
				}
				byLog[i] += len(members)
				for _, m := range members {
					sent(m, w)
				}
			}
		}
	}
	logsUsable := len(sentBy) > 0
	if logsUsable && len(sentBy) != n {
		t.Errorf("the workers' logs report %d intents sent, want %d", len(sentBy), n)
	}
	for i, w := range workers {
		// A worker's work is the sends of its drain (its "sent" log
		// lines) and its River jobs (batch jobs).
		if byRiver[i] == 0 && byLog[i] == 0 {
			t.Errorf("%s completed no River job and drained nothing: the work was not spread (by River: %v, by logs: %v)", w.name, byRiver, byLog)
		}
		// With coalescing a few batch requests carry every email, so a
		// worker may well send none of them itself: the spread is judged
		// by the batch jobs it ran too.
		if logsUsable && byLog[i] == 0 && coalesce == 0 {
			t.Errorf("%s logged no send: the work was not spread (by logs: %v)", w.name, byLog)
		}
	}
	if !logsUsable {
		t.Logf("the workers log no \"sent\" line with a key at info level; attribution by River's attempted_by only")
	}

	// No intent was even attempted twice: each was claimed once (a
	// coalesced one, by its batch's one attempt).
	outbox := outboxRows(t, pool)
	for key, r := range outbox {
		if r.Attempts != 1 {
			t.Errorf("intent %s: %d attempts, want 1 (no faults, no crashes)", key, r.Attempts)
		}
	}
	l := checkExactlyOnce(t, srv, pool, intents)

	if coalesce == 0 {
		summary(t, "%s: seed=%d intents=%d workers=%d sent_by_river=%s sent_by_logs=%s jobs=%d deliveries=%d duplicates=%d lost=%d elapsed=%s",
			name, suite.seed, n, nWorkers, ints(byRiver), ints(byLog), jobs, l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
		return
	}
	cs := checkCoalesced(t, srv, outbox, l.Batches)
	summary(t, "%s: seed=%d intents=%d coalesce=%d concurrency=%d workers=%d jobs_by_river=%s sent_by_logs=%s jobs=%d deliveries=%d duplicates=%d lost=%d %s requests=%d elapsed=%s",
		name, suite.seed, n, coalesce, opts.Concurrency, nWorkers, ints(byRiver), ints(byLog), jobs, l.Deliveries, l.Duplicates, l.Lost, cs,
		len(srv.Requests()), time.Since(start).Round(time.Second))
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "/")
}
