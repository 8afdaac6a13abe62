package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestPausedWorker (issue 24) stops a worker running with the command's
// default flags (SIGSTOP, as a long GC pause or a frozen VM would) while the
// API holds back the answers of sends it has delivered, for longer than its
// lease. Another worker must take its intents over and replay them; then
// the paused worker is continued (SIGCONT), its answers waiting in its
// sockets, and must record nothing for the intents taken over from it: the
// API sees at most one delivery per key, the outbox holds the survivor's
// answers (replays, for the sends the victim had delivered), and a send
// the victim writes once continued is a replay.
//
// Its sql variant inserts every intent by plain SQL: no River job of their
// own, the drain sends them all, and a paused drain must record nothing
// over the survivor either.
func TestPausedWorker(t *testing.T) {
	t.Run("go", func(t *testing.T) { pausedWorker(t, false) })
	t.Run("sql", func(t *testing.T) { pausedWorker(t, true) })
}

func pausedWorker(t *testing.T, viaSQL bool) {
	setup(t)
	start := time.Now()
	name, label := "paused-worker", "paused"
	if viaSQL {
		name, label = "paused-worker/sql", "paused_sql"
	}
	rng := rngFor(name)
	n := 40 * suite.scale
	// The first request of each key is answered only after 3 s; replays at
	// once.
	srv := newFake(t, name, mustFaults(t, "latency_after=3s;method=POST;times=1")...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), label)
	e := processEnv(dbURL, srv)
	intents := makeIntents(rng, fmt.Sprintf("%s-%d", label, suite.seed), n)
	if viaSQL {
		enqueueSQL(t, pool, intents)
	} else {
		enqueueGo(t, pool, intents)
	}
	ctx := context.Background()
	opts := workerOptions{Concurrency: 8, Defaults: true}
	victim := startVictim(t, pool, srv, e, opts)
	if err := syscall.Kill(-victim.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(-victim.pid(), syscall.SIGCONT) })
	// What the victim has in flight: it is the only worker so far.
	held, err := queryStrings(ctx, pool, `SELECT idempotency_key FROM sendonce_outbox WHERE state = 'sending' ORDER BY 1`)
	if err != nil || len(held) == 0 {
		t.Fatalf("intents sending at the pause: %v, %v", held, err)
	}

	survivor := startWorker(t, "survivor", e, opts)
	survivor.riverClientID(t, 30*time.Second)
	waitFor(t, time.Minute, "the paused worker's intents to be taken over and sent", func() (bool, string) {
		var unsent int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'sent') FROM sendonce_outbox WHERE idempotency_key = ANY($1)`, held).Scan(&unsent)
		return err == nil && unsent == 0, fmt.Sprintf("%d of %d not yet sent (err %v)", unsent, len(held), err)
	})
	takeover := time.Since(pausedAt)
	// The API answered the victim's own requests while it was stopped:
	// the answers wait in its sockets.
	waitFor(t, 30*time.Second, "the API to answer the paused worker's requests", func() (bool, string) {
		_, p := deliveryWindow(srv)
		return p == 0, fmt.Sprintf("%d unanswered", p)
	})
	pause := time.Since(pausedAt)
	resumedAt := time.Now()
	if err := syscall.Kill(-victim.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the continued worker to find its lease lost", func() (bool, string) {
		return victim.logged("lease lost") > 0, tail(victim.stderr.String(), 500)
	})
	waitAllSent(t, pool, n, 2*time.Minute, func() string {
		d, p := deliveryWindow(srv)
		return fmt.Sprintf("fake: %d delivered, %d unanswered", d, p)
	})
	victim.stop(t)
	survivor.stop(t)

	l := checkExactlyOnce(t, srv, pool, intents)
	rows := outboxRows(t, pool)
	isHeld := map[string]bool{}
	for _, k := range held {
		isHeld[k] = true
	}
	// The survivor's answer for a held intent is the last one the API gave
	// under its key before the victim was continued (every held intent was
	// sent by then, and only the victim sends after). Most were in the
	// victim's window, delivered and answered late, so the survivor's send
	// is a replay; one the victim had claimed but not yet sent when it was
	// stopped is the survivor's first delivery, and the victim's own
	// request, written when it was continued, must be a replay.
	survivorAnswer := map[string]fakeapi.RequestRecord{}
	replays := 0
	for _, r := range srv.Requests() {
		if r.Method != "POST" || !isHeld[r.IdempotencyKey] {
			continue
		}
		switch {
		case r.ReceivedAt.Before(resumedAt) && r.Status == http.StatusOK:
			if prev, ok := survivorAnswer[r.IdempotencyKey]; !ok || r.ReceivedAt.After(prev.ReceivedAt) {
				survivorAnswer[r.IdempotencyKey] = r
			}
		case !r.ReceivedAt.Before(resumedAt) && !(r.Replayed || r.Status >= 400):
			t.Errorf("the paused worker's send of %s, written after it was continued, was not a replay: %+v", r.IdempotencyKey, r)
		}
	}
	for _, k := range held {
		a, ok := survivorAnswer[k]
		switch {
		case !ok:
			t.Errorf("intent %s: taken over from the paused worker, yet the API accepted no send of it before the worker was continued", k)
		case rows[k].Replayed != a.Replayed:
			t.Errorf("intent %s: recorded replayed=%v, but the survivor's answer said replayed=%v: %+v", k, rows[k].Replayed, a.Replayed, rows[k])
		case a.Replayed:
			replays++
		}
	}
	if replays == 0 {
		t.Errorf("none of the %d intents held by the paused worker was replayed by the survivor: the run proved nothing about the window", len(held))
	}
	// The victim's log: nothing recorded for what it held when paused.
	notRecorded, cutOff := 0, 0
	for _, line := range victim.logLines() {
		key, _ := line["key"].(string)
		msg, _ := line["msg"].(string)
		if !isHeld[key] {
			continue
		}
		switch {
		case msg == "sent" || strings.HasPrefix(msg, "intent failed") || msg == "snoozed" || msg == "send failed, will retry":
			t.Errorf("the paused worker recorded %q for %s, which another worker had taken over: %v", msg, key, line)
		case strings.HasPrefix(msg, "the API answered after this worker's lease ended"):
			notRecorded++
		case strings.HasPrefix(msg, "send cut off"):
			cutOff++
		}
	}
	if notRecorded+cutOff == 0 {
		t.Errorf("the paused worker logged nothing of the %d sends it held: the run proved nothing about its records\n%s", len(held), victim.output())
	}
	summary(t, "%s: seed=%d intents=%d held=%d lease=%s pause=%s sigstop_to_replayed=%s not_recorded=%d cut_off=%d deliveries=%d duplicates=%d lost=%d elapsed=%s",
		name, suite.seed, n, len(held), defaultLease, pause.Round(100*time.Millisecond), takeover.Round(100*time.Millisecond),
		notRecorded, cutOff, l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
}

// defaultLease is `sendonce work`'s default --lease, as the summaries name it.
const defaultLease = "5s"

// logged counts the process's log lines whose message contains s.
func (p *proc) logged(s string) int {
	n := 0
	for _, l := range p.logLines() {
		if msg, _ := l["msg"].(string); strings.Contains(msg, s) {
			n++
		}
	}
	return n
}

// startVictim starts the worker a test will stop or kill, once the server
// has been up longer than the restart grace (waitForServerUptime), and
// returns when it waits on 4 or more deliveries the API has not answered.
func startVictim(t testing.TB, pool *pgxpool.Pool, srv *fakeapi.Server, e env, opts workerOptions) *proc {
	t.Helper()
	waitForServerUptime(t, pool)
	victim := startWorker(t, "victim", e, opts)
	victim.riverClientID(t, 30*time.Second)
	waitFor(t, 60*time.Second, "deliveries the victim is waiting on", func() (bool, string) {
		d, p := deliveryWindow(srv)
		return p >= 4, fmt.Sprintf("%d delivered, %d unanswered", d, p)
	})
	return victim
}

// waitForServerUptime waits until the database server has been up longer
// than the restart grace (sendstate.DefaultRestartGrace), within which no
// lease is ended; a production server has been up for longer.
func waitForServerUptime(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	waitFor(t, time.Minute, "the server to be up longer than the restart grace", func() (bool, string) {
		var up time.Duration
		err := pool.QueryRow(context.Background(), `SELECT now() - pg_postmaster_start_time()`).Scan(&up)
		return err == nil && up > sendstate.DefaultRestartGrace, fmt.Sprint(up, err)
	})
}
