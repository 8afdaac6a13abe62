package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestRescueTime SIGKILLs a worker running with the command's default
// flags while the API holds back the answers of sends it has delivered,
// and measures how long its cut-off intents take to be sent (replayed) by
// the surviving worker. River's rescuer alone would take --rescue-after
// (6 min by default); the dead worker's lease (3 s by default) ends, and
// the survivor's sweep timed for that end hands them over: within the
// lease and a send, once the survivor has a free slot (its slots are busy
// with sends the API answers after 3 s, so a rescue later than the first of
// them to end waits 3 s more: 6.1 s with a lease of 4 s or 5 s).
//
// It runs three times: directly, and with every connection of the
// producer and the workers through PgBouncer in transaction mode and in
// session mode (SENDONCE_POOLER names the mode; the flags stay the
// defaults).
func TestRescueTime(t *testing.T) {
	t.Run("direct", func(t *testing.T) { rescueTime(t, variant{}) })
	t.Run("pgbouncer-transaction", func(t *testing.T) { rescueTime(t, variant{Pooler: pgbouncer.Transaction}) })
	t.Run("pgbouncer-session", func(t *testing.T) { rescueTime(t, variant{Pooler: pgbouncer.Session}) })
}

// maxRescue is the bound on SIGKILL to replayed with default flags: the
// 3 s lease and the send, with room for a loaded machine.
const maxRescue = 10 * time.Second

func rescueTime(t *testing.T, v variant) {
	setup(t)
	start := time.Now()
	name := variantName("rescue-time", v)
	rng := rngFor(name)
	n := 40 * suite.scale
	// The first request of each key is answered only after 3 s: a kill
	// lands while its delivery is unanswered. Replays are answered at once.
	srv := newFake(t, name, mustFaults(t, "latency_after=3s;method=POST;times=1")...)
	label, prefix := "rescue", fmt.Sprintf("rescue-%d", suite.seed)
	if v.Pooler != "" {
		label, prefix = label+"_"+v.poolerTag(), prefix+"-"+v.poolerTag()
	}
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), label)
	e, producers := v.route(t, dbURL, pool, srv)
	intents := makeIntents(rng, prefix, n)
	enqueueGo(t, producers, intents)

	opts := workerOptions{Concurrency: 8, Defaults: true}
	victim := startVictim(t, pool, srv, e, opts)
	survivor := startWorker(t, "survivor", e, opts)
	survivor.riverClientID(t, 30*time.Second)
	victim.kill()
	killedAt := time.Now()

	// Wait for the sends the kill cut off (the fake logs their requests as
	// 499, the client gone) to be recorded as sent.
	var cut []string
	var lastSent time.Time
	waitFor(t, 2*time.Minute, "the cut-off intents to be sent", func() (bool, string) {
		cut = cut[:0]
		for k := range interruptedKeys(srv) {
			cut = append(cut, k)
		}
		slices.Sort(cut)
		var unsent int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state <> 'sent'), coalesce(max(sent_at), now())
			FROM sendonce_outbox WHERE idempotency_key = ANY($1)`, cut).Scan(&unsent, &lastSent)
		return err == nil && len(cut) > 0 && unsent == 0, fmt.Sprintf("%d cut off, %d not yet sent, err %v", len(cut), unsent, err)
	})
	rescue := lastSent.Sub(killedAt)
	waitFor(t, 2*time.Minute, "every intent to be sent", func() (bool, string) {
		o, err := outboxStates(context.Background(), pool)
		return err == nil && o["sent"] == n, fmt.Sprint(o, err)
	})
	survivor.stop(t)

	l := checkExactlyOnce(t, srv, pool, intents)
	rows := outboxRows(t, pool)
	for _, k := range cut {
		if !rows[k].Replayed {
			t.Errorf("intent %s: cut off by the kill after delivery, yet not recorded as replayed", k)
		}
	}
	// The goal is seconds, far below River's 6 min rescue.
	if rescue > maxRescue {
		t.Errorf("the cut-off intents took %s after the SIGKILL to be sent, want at most %s", rescue, maxRescue)
	}
	summary(t, "%s: seed=%d intents=%d cut_off=%d sigkill_to_replayed=%s deliveries=%d duplicates=%d lost=%d elapsed=%s",
		name, suite.seed, n, len(cut), rescue.Round(100*time.Millisecond), l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
}
