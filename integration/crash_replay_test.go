package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/pgtest"
)

// TestCrashReplay kills workers with SIGKILL while the API holds answers
// back after delivering (latency_after), so kills land between "the API
// delivered" and "the outbox recorded it", restarts them, and checks that
// every intent was delivered exactly once: the interrupted sends were
// replayed under their stored keys, not repeated.
func TestCrashReplay(t *testing.T) {
	setup(t)
	start := time.Now()
	rng := rngFor("crash-replay")
	n := 200 * suite.scale
	kills := 4 * suite.scale
	const hold = 300 * time.Millisecond // the window: delivered, not yet answered

	srv := newFake(t, "crash-replay", mustFaults(t, fmt.Sprintf("latency_after=%s;method=POST", hold))...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "crash")
	e := processEnv(dbURL, srv)

	// Producers of all three kinds: the command line, plain SQL (no River
	// job: the sweeper schedules them) and the Go API.
	intents := makeIntents(rng, fmt.Sprintf("crash-%d", suite.seed), n)
	nCLI, nSQL := 5, n/10
	enqueueCLI(t, e, intents[:nCLI])
	enqueueSQL(t, pool, intents[nCLI:nCLI+nSQL])
	enqueueGo(t, pool, intents[nCLI+nSQL:])
	recipients := 0
	for _, in := range intents {
		recipients += len(in.Recipients)
	}

	opts := workerOptions{Concurrency: 8, JobTimeout: 2 * time.Second, RescueAfter: 3 * time.Second, APITimeout: 1500 * time.Millisecond}
	workers := make([]*proc, 2)
	generation := 0
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d.%d", i, generation), e, opts)
	}

	// Kill instants: random delivery counts between 5% and 75% of the
	// run, each awaited as an event (that many deliveries, and at least one
	// of them still waiting for its answer), not slept towards.
	thresholds := make([]int, 0, kills)
	for len(thresholds) < kills {
		v := recipients/20 + rng.IntN(recipients*70/100)
		if !slices.Contains(thresholds, v) {
			thresholds = append(thresholds, v)
		}
	}
	slices.Sort(thresholds)
	killedWithAnswersPending := 0
	for k, threshold := range thresholds {
		pendingAtKill := 0
		waitFor(t, 60*time.Second, fmt.Sprintf("kill %d: %d deliveries with one still unanswered", k+1, threshold), func() (bool, string) {
			delivered, pending := deliveryWindow(srv)
			pendingAtKill = pending
			return delivered >= threshold && pending > 0, fmt.Sprintf("%d delivered, %d unanswered", delivered, pending)
		})
		victim := rng.IntN(len(workers))
		workers[victim].kill()
		if pendingAtKill > 0 {
			killedWithAnswersPending++
		}
		generation++
		t.Logf("kill %d: SIGKILL %s at %d deliveries (%d answers pending); restarting", k+1, workers[victim].name, threshold, pendingAtKill)
		workers[victim] = startWorker(t, fmt.Sprintf("worker%d.%d", victim, generation), e, opts)
	}

	// The interrupted sends come back once River's rescuer (run by the
	// leader, which a killed leader's lease keeps away for up to 15 s) finds
	// their jobs older than --rescue-after.
	waitAllSent(t, pool, n, 3*time.Minute*time.Duration(suite.scale), func() string {
		d, p := deliveryWindow(srv)
		return fmt.Sprintf("fake: %d delivered, %d unanswered", d, p)
	})

	for _, w := range workers {
		w.stop(t)
	}

	l := checkExactlyOnce(t, srv, intents)

	// Every send whose answer a kill cut off (the fake recorded 499, client
	// gone, after delivering) must have been recorded as a replay.
	rows := outboxRows(t, pool)
	interrupted := interruptedKeys(srv)
	for key := range interrupted {
		if r := rows[key]; !r.Replayed {
			t.Errorf("intent %s: its delivery's answer was cut off by a kill, yet the outbox says replayed=%v (state %s, attempts %d)", key, r.Replayed, r.State, r.Attempts)
		}
	}
	replayed := 0
	for _, r := range rows {
		if r.Replayed {
			replayed++
		}
	}
	if len(interrupted) == 0 {
		t.Errorf("no kill landed between delivery and record (%d kills with answers pending): the run proved nothing about replays", killedWithAnswersPending)
	}
	if len(interrupted) > 0 && replayed < 1 {
		t.Errorf("kills interrupted %d delivered sends, but no intent is marked replayed", len(interrupted))
	}

	summary(t, "crash-replay: seed=%d intents=%d kills=%d restarts=%d interrupted=%d deliveries=%d duplicates=%d lost=%d replayed=%d elapsed=%s",
		suite.seed, n, kills, generation, len(interrupted), l.Deliveries, l.Duplicates, l.Lost, replayed, time.Since(start).Round(time.Second))
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
