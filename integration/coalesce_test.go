package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
)

// coalesceAll is --coalesce in the coalescing variants: the most a batch
// request may hold.
const coalesceAll = 100

// variant is one way of running a scenario.
type variant struct {
	// Coalesce is --coalesce (0: every intent sent alone).
	Coalesce int
	// PollOnly runs the workers with --poll-only: no LISTEN/NOTIFY.
	PollOnly bool
	// Pooler puts a PgBouncer in this pool mode between the database and
	// every producer and worker ("": none; see route).
	Pooler pgbouncer.Mode
}

// variants runs a scenario five times, as subtests: "single", every
// intent sent alone (coalesce 0); "coalesce", email intents coalesced into
// batch requests (--coalesce 100); "poll-only", sent alone by workers
// that never LISTEN (--poll-only); and "pgbouncer-transaction" and
// "pgbouncer-session", sent alone with every connection of the producers
// and workers through PgBouncer in that pool mode (see route).
func variants(t *testing.T, scenario func(t *testing.T, v variant)) {
	t.Run("single", func(t *testing.T) { scenario(t, variant{}) })
	t.Run("coalesce", func(t *testing.T) { scenario(t, variant{Coalesce: coalesceAll}) })
	t.Run("poll-only", func(t *testing.T) { scenario(t, variant{PollOnly: true}) })
	t.Run("pgbouncer-transaction", func(t *testing.T) { scenario(t, variant{Pooler: pgbouncer.Transaction}) })
	t.Run("pgbouncer-session", func(t *testing.T) { scenario(t, variant{Pooler: pgbouncer.Session}) })
}

// variantName is the scenario's name in summaries and random streams: the
// single variant keeps the scenario's own, so a seed repeats its draws.
func variantName(scenario string, v variant) string {
	switch {
	case v.Coalesce > 0:
		return scenario + "/coalesce"
	case v.PollOnly:
		return scenario + "/poll-only"
	case v.Pooler != "":
		return scenario + "/pgbouncer-" + string(v.Pooler)
	}
	return scenario
}

// needCoalesce fails a coalescing variant at once when the command has no
// --coalesce (workerArgs would leave the flag out and the run would prove
// nothing about batches).
func needCoalesce(t testing.TB, v variant) {
	t.Helper()
	if v.Coalesce > 0 && !hasFlag(t, "work", "coalesce") {
		t.Fatalf("sendonce work has no --coalesce flag")
	}
	if v.PollOnly && !hasFlag(t, "work", "poll-only") {
		t.Fatalf("sendonce work has no --poll-only flag")
	}
}

// coalesceStats is what a coalescing run did with batches.
type coalesceStats struct {
	Batches  int // distinct batch keys the API was sent
	Requests int // POST /emails/batch requests under batch keys
	Members  int // intents whose row names a batch
	Replayed int // batches the API answered with a replay, every member recorded replayed
}

// String renders the stats for a summary line.
func (c coalesceStats) String() string {
	return fmt.Sprintf("batches=%d batch_requests=%d coalesced=%d replayed_batches=%d", c.Batches, c.Requests, c.Members, c.Replayed)
}

// checkCoalesced is the coalescing variants' own check, besides
// checkExactlyOnce (which already holds every delivery to the key its
// intent's row names): batch requests were made, and a batch is replayed
// whole: every batch the API answered with a replay has all its members
// recorded sent and replayed, and a member recorded replayed belongs to a
// batch the API replayed.
func checkCoalesced(t testing.TB, srv *fakeapi.Server, rows map[string]outboxRow, b *batches) coalesceStats {
	t.Helper()
	var st coalesceStats
	replayed := map[string]bool{} // batch key → the API replayed it at least once
	for key, rs := range sendRequests(srv) {
		if !strings.HasPrefix(key, sendstate.BatchKeyPrefix) {
			continue
		}
		st.Batches++
		for _, r := range rs {
			if strings.HasSuffix(r.Path, "/emails/batch") {
				st.Requests++
			}
			if r.Replayed {
				replayed[key] = true
			}
		}
	}
	if st.Requests == 0 {
		t.Errorf("no request went to POST /emails/batch under a %s key: nothing was coalesced", sendstate.BatchKeyPrefix)
	}
	keys := make([]string, 0, len(replayed))
	for k := range replayed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		members := b.memberList(key)
		if len(members) == 0 {
			t.Errorf("batch %s was replayed by the API, but no outbox row names it", key)
			continue
		}
		whole := true
		for _, m := range members {
			if r := rows[m]; r.State != "sent" || !r.Replayed {
				whole = false
				t.Errorf("batch %s was replayed by the API, but its member %s is recorded state=%s replayed=%v", key, m, r.State, r.Replayed)
			}
		}
		if whole {
			st.Replayed++
		}
	}
	for _, r := range rows {
		if r.BatchKey == "" {
			continue
		}
		st.Members++
		if r.Replayed && !replayed[r.BatchKey] {
			t.Errorf("intent %s is recorded replayed, but the API never replayed its batch %s", r.Key, r.BatchKey)
		}
	}
	return st
}

// interruptedIntents are the intents whose delivery's answer never got to
// the worker (interruptedKeys), a batch key standing for its members.
func interruptedIntents(srv *fakeapi.Server, b *batches) map[string]bool {
	out := map[string]bool{}
	for key := range interruptedKeys(srv) {
		if members := b.memberList(key); len(members) > 0 {
			for _, m := range members {
				out[m] = true
			}
			continue
		}
		out[key] = true
	}
	return out
}

// pendingBatches are the batch keys of deliveries whose request is still
// unanswered, the latest delivered first.
func pendingBatches(srv *fakeapi.Server) []string {
	answered := map[string]bool{}
	for _, r := range srv.Requests() {
		answered[r.RequestID] = !r.AnsweredAt.IsZero()
	}
	var out []string
	seen := map[string]bool{}
	ds := srv.Deliveries()
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		if !answered[d.RequestID] && strings.HasPrefix(d.IdempotencyKey, sendstate.BatchKeyPrefix) && !seen[d.IdempotencyKey] {
			seen[d.IdempotencyKey] = true
			out = append(out, d.IdempotencyKey)
		}
	}
	return out
}

// batchSender is the index of the worker whose River client runs the job
// of batch key (by River's attempted_by), or -1.
func batchSender(pool *pgxpool.Pool, workers []*proc, key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var id string
	err := pool.QueryRow(ctx, `SELECT coalesce(j.attempted_by[array_length(j.attempted_by, 1)], '')
		FROM sendonce_batch b JOIN river_job j ON j.id = b.job_id WHERE b.idempotency_key = $1`, key).Scan(&id)
	if err != nil || id == "" {
		return -1
	}
	for i, w := range workers {
		if w.clientID() == id {
			return i
		}
	}
	return -1
}

// clientID is the River client id the process logged at its start, or ""
// while it has not.
func (p *proc) clientID() string {
	for _, l := range p.logLines() {
		if l["msg"] == "River client started" {
			id, _ := l["client_id"].(string)
			return id
		}
	}
	return ""
}

// checkListeners checks that the workers LISTEN unless they poll only: a
// session waiting for notifications shows its LISTEN as its last query.
func checkListeners(t testing.TB, pool *pgxpool.Pool, v variant) {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	// A transaction pooler implies --poll-only (SENDONCE_POOLER).
	pollOnly := v.PollOnly || v.Pooler == pgbouncer.Transaction
	switch {
	case pollOnly && n > 0:
		t.Errorf("%d sessions of --poll-only workers LISTEN", n)
	case !pollOnly && n == 0:
		t.Errorf("no worker session LISTENs: the check cannot tell poll-only from the default")
	}
}
