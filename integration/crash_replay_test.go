package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestCrashReplay kills workers with SIGKILL while the API holds answers
// back after delivering (latency_after), so kills land between "the API
// delivered" and "the outbox recorded it", restarts them, and checks that
// every intent was delivered exactly once: the interrupted sends were
// replayed under their stored keys, not repeated. It runs twice: every
// intent sent alone, and with --coalesce 100, where the kills land on whole
// batch requests and a batch must be replayed whole.
func TestCrashReplay(t *testing.T) { variants(t, crashReplay) }

func crashReplay(t *testing.T, v variant) {
	coalesce := v.Coalesce
	setup(t)
	needCoalesce(t, v)
	start := time.Now()
	name := variantName("crash-replay", v)
	rng := rngFor(name)
	n := 200 * suite.scale
	kills := 4 * suite.scale
	const hold = 300 * time.Millisecond // the window: delivered, not yet answered

	srv := newFake(t, name, mustFaults(t, fmt.Sprintf("latency_after=%s;method=POST", hold))...)
	label, prefix := "crash", fmt.Sprintf("crash-%d", suite.seed)
	if coalesce > 0 {
		label, prefix = "crash_co", fmt.Sprintf("crashco-%d", suite.seed)
	}
	if v.PollOnly {
		label, prefix = label+"_poll", fmt.Sprintf("crashpoll-%d", suite.seed)
	}
	if v.Pooler != "" {
		label, prefix = label+"_"+v.poolerTag(), prefix+"-"+v.poolerTag()
	}
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), label)
	e, producers := v.route(t, dbURL, pool, srv)

	// Producers of all three kinds: the command line, plain SQL (no River
	// job: the sweeper schedules them) and the Go API.
	intents := makeIntents(rng, prefix, n)
	nCLI, nSQL := 5, n/10
	enqueueCLI(t, e, intents[:nCLI])
	enqueueSQL(t, producers, intents[nCLI:nCLI+nSQL])
	enqueueGo(t, producers, intents[nCLI+nSQL:])
	recipients := 0
	for _, in := range intents {
		recipients += len(in.Recipients)
	}

	// Coalescing: each member job holds a River slot while its batch
	// gathers, so the concurrency bounds a batch's size.
	opts := workerOptions{Concurrency: 8, JobTimeout: 2 * time.Second, RescueAfter: 3 * time.Second, APITimeout: 1500 * time.Millisecond}
	if coalesce > 0 {
		opts.Concurrency, opts.Coalesce = 50, coalesce
	}
	opts.PollOnly = v.PollOnly
	workers := make([]*proc, 2)
	generation := 0
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d.%d", i, generation), e, opts)
	}

	// Kill instants: random delivery counts between 5% and 75% of the
	// run, each awaited as an event (that many deliveries, and at least one
	// of them still waiting for its answer), not slept towards. Coalescing,
	// the delivery waiting for its answer must be a batch's, and the victim
	// is the worker sending it. Deliveries come in bursts then, so a kill
	// whose instant a burst jumped past, with everything delivered and
	// answered, goes ahead without a send to cut off.
	thresholds := make([]int, 0, kills)
	for len(thresholds) < kills {
		v := recipients/20 + rng.IntN(recipients*70/100)
		if !slices.Contains(thresholds, v) {
			thresholds = append(thresholds, v)
		}
	}
	slices.Sort(thresholds)
	killedWithAnswersPending := 0
	var marks []killMark
	for k, threshold := range thresholds {
		pendingAtKill := 0
		var batches []string
		waitFor(t, 60*time.Second, fmt.Sprintf("kill %d: %d deliveries with one still unanswered", k+1, threshold), func() (bool, string) {
			delivered, pending := deliveryWindow(srv)
			pendingAtKill = pending
			if coalesce > 0 {
				batches = pendingBatches(srv)
				if len(batches) == 0 {
					pendingAtKill = 0
				}
			}
			return (delivered >= threshold && pendingAtKill > 0) || delivered >= recipients,
				fmt.Sprintf("%d delivered, %d unanswered, %d batches unanswered", delivered, pending, len(batches))
		})
		victim := rng.IntN(len(workers))
		if len(batches) > 0 {
			if i := batchSender(pool, workers, batches[0]); i >= 0 {
				victim = i
			}
		}
		pending := unansweredKeys(srv)
		workers[victim].kill()
		marks = append(marks, killMark{at: time.Now(), keys: pending})
		if pendingAtKill > 0 {
			killedWithAnswersPending++
		}
		generation++
		t.Logf("kill %d: SIGKILL %s at %d deliveries (%d answers pending, batches %v); restarting", k+1, workers[victim].name, threshold, pendingAtKill, batches)
		workers[victim] = startWorker(t, fmt.Sprintf("worker%d.%d", victim, generation), e, opts)
	}

	// The interrupted sends come back once the killed worker's lease ends
	// (--lease, 3 s by default): the sweep at its end puts the rows it left
	// sending back on the drain, uncertain (RescueDrained); a batch's River
	// job comes back when River's rescuer (run by the leader, which a killed
	// leader's lease keeps away for up to 15 s) finds it older than
	// --rescue-after, or the lease ends, whichever is first.
	waitAllSent(t, pool, n, 3*time.Minute*time.Duration(suite.scale), func() string {
		d, p := deliveryWindow(srv)
		return fmt.Sprintf("fake: %d delivered, %d unanswered", d, p)
	})

	checkListeners(t, pool, v)
	for _, w := range workers {
		w.stop(t)
	}

	l := checkExactlyOnce(t, srv, pool, intents)

	// Every send whose answer a kill cut off (the fake recorded 499, client
	// gone, after delivering) must have been recorded as a replay: for a
	// batch, every one of its members.
	rows := outboxRows(t, pool)
	interrupted := interruptedIntents(srv, l.Batches)
	for key := range interrupted {
		if r := rows[key]; !r.Replayed {
			t.Errorf("intent %s: its delivery's answer (batch %q) was cut off by a kill, yet the outbox says replayed=%v (state %s, attempts %d)", key, r.BatchKey, r.Replayed, r.State, r.Attempts)
		}
	}
	replayed := countReplayed(rows)
	worst := worstReplay(t, pool, marks, interruptedKeys(srv))
	if len(interrupted) == 0 {
		t.Errorf("no kill landed between delivery and record (%d kills with answers pending): the run proved nothing about replays", killedWithAnswersPending)
	}
	if len(interrupted) > 0 && replayed < 1 {
		t.Errorf("kills interrupted %d delivered sends, but no intent is marked replayed", len(interrupted))
	}

	if coalesce == 0 {
		summary(t, "%s: seed=%d intents=%d kills=%d restarts=%d interrupted=%d deliveries=%d duplicates=%d lost=%d replayed=%d max_kill_to_replayed=%s elapsed=%s",
			name, suite.seed, n, kills, generation, len(interrupted), l.Deliveries, l.Duplicates, l.Lost, replayed, worst.Round(100*time.Millisecond), time.Since(start).Round(time.Second))
		return
	}
	cs := checkCoalesced(t, srv, rows, l.Batches)
	if cs.Replayed == 0 {
		t.Errorf("no batch was replayed whole (%d kills with a batch's answer pending): the run proved nothing about replaying batches", killedWithAnswersPending)
	}
	summary(t, "%s: seed=%d intents=%d coalesce=%d concurrency=%d kills=%d kills_on_pending_batch=%d restarts=%d interrupted=%d deliveries=%d duplicates=%d lost=%d replayed=%d max_kill_to_replayed=%s %s requests=%d elapsed=%s",
		name, suite.seed, n, coalesce, opts.Concurrency, kills, killedWithAnswersPending, generation, len(interrupted), l.Deliveries, l.Duplicates, l.Lost, replayed,
		worst.Round(100*time.Millisecond), cs, len(srv.Requests()), time.Since(start).Round(time.Second))
}

// deliveryWindow counts the fake's deliveries, and those whose request is
// still unanswered: delivered by the API, not yet known to the worker.
func deliveryWindow(srv *fakeapi.Server) (delivered, unanswered int) {
	answered := map[string]bool{}
	for _, r := range srv.Requests() {
		answered[r.RequestID] = !r.AnsweredAt.IsZero()
	}
	ds := srv.Deliveries()
	for _, d := range ds {
		if !answered[d.RequestID] {
			unanswered++
		}
	}
	return len(ds), unanswered
}

// killMark is a kill's instant and the keys whose deliveries were waiting
// for their answers then.
type killMark struct {
	at   time.Time
	keys []string
}

// unansweredKeys are the keys of deliveries whose request is unanswered.
func unansweredKeys(srv *fakeapi.Server) []string {
	answered := map[string]bool{}
	for _, r := range srv.Requests() {
		answered[r.RequestID] = !r.AnsweredAt.IsZero()
	}
	var out []string
	for _, d := range srv.Deliveries() {
		if !answered[d.RequestID] {
			out = append(out, d.IdempotencyKey)
		}
	}
	return out
}

// worstReplay is the longest time from a kill to the recording of the
// last send it cut off (a key waiting for its answer at the kill whose
// answer never reached its worker), by the outbox's sent_at; for a batch
// key, its members'.
func worstReplay(t testing.TB, pool *pgxpool.Pool, marks []killMark, cut map[string]bool) time.Duration {
	t.Helper()
	var worst time.Duration
	for _, m := range marks {
		var keys []string
		for _, k := range m.keys {
			if cut[k] {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		var last *time.Time
		if err := pool.QueryRow(context.Background(), `SELECT max(sent_at) FROM sendonce_outbox
			WHERE idempotency_key = ANY($1) OR batch_key = ANY($1)`, keys).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if last != nil {
			worst = max(worst, last.Sub(m.at))
		}
	}
	return worst
}

// interruptedKeys are the keys whose delivering request never got its
// answer to the worker: the client went away (499) or the answer was
// dropped.
func interruptedKeys(srv *fakeapi.Server) map[string]bool {
	byID := map[string]fakeapi.RequestRecord{}
	for _, r := range srv.Requests() {
		byID[r.RequestID] = r
	}
	out := map[string]bool{}
	for _, d := range srv.Deliveries() {
		if r, ok := byID[d.RequestID]; ok && (r.Status == 499 || r.Dropped) {
			out[d.IdempotencyKey] = true
		}
	}
	return out
}
