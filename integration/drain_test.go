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
// TestPausedDrainWorker is TestPausedWorker with every intent inserted
// by plain SQL (job_id NULL): the drain sends them all. The paused worker
// must record nothing over the survivor, and every intent it held must be
// sent exactly once.
func TestPausedDrainWorker(t *testing.T) {
	setup(t)
	start := time.Now()
	rng := rngFor("adv-paused-drain")
	n := 40 * suite.scale
	srv := newFake(t, "adv-paused-drain", mustFaults(t, "latency_after=3s;method=POST;times=1")...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "advpaused")
	e := processEnv(dbURL, srv)
	intents := makeIntents(rng, fmt.Sprintf("advpaused-%d", suite.seed), n)
	enqueueSQL(t, pool, intents)
	ctx := context.Background()
	opts := workerOptions{Concurrency: 8, Defaults: true}
	victim := startVictim(t, pool, srv, e, opts)
	if err := syscall.Kill(-victim.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(-victim.pid(), syscall.SIGCONT) })
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
	waitFor(t, 30*time.Second, "the API to answer the paused worker's requests", func() (bool, string) {
		_, p := deliveryWindow(srv)
		return p == 0, fmt.Sprintf("%d unanswered", p)
	})
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
	isHeld := map[string]bool{}
	for _, k := range held {
		isHeld[k] = true
	}
	for _, r := range srv.Requests() {
		if r.Method == "POST" && isHeld[r.IdempotencyKey] && !r.ReceivedAt.Before(resumedAt) && !(r.Replayed || r.Status >= 400) {
			t.Errorf("the paused worker's send of %s, written after it was continued, was not a replay: %+v", r.IdempotencyKey, r)
		}
	}
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
	var failed int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE state <> 'sent'`).Scan(&failed)
	if failed != 0 {
		t.Errorf("%d rows not sent", failed)
	}
	summary(t, "adv-paused-drain: intents=%d held=%d sigstop_to_replayed=%s not_recorded=%d cut_off=%d deliveries=%d duplicates=%d lost=%d elapsed=%s",
		n, len(held), takeover.Round(100*time.Millisecond), notRecorded, cutOff, l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
}

var _ = http.StatusOK
var _ fakeapi.Config
var _ *pgxpool.Pool
var _ = sendstate.DefaultLease
