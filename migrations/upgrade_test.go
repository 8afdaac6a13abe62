package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// releaseVersion is the newest sendonce migration of the last release
// that landed (after issues 10-12; batches, runs, webhooks, suppression,
// retention and tracing came after it), and releaseCommit that release's
// commit, whose worker the test runs during the upgrade.
const (
	releaseVersion = 3
	releaseCommit  = "a97dc09b574ccb05fc51be3711fb9216db938bc3"
)

const upgradeAPIKey = "oe_test_upgrade000000000"

// TestUpgradeWhileWorking builds a database of the release's schema with
// intents in every state, starts the release's worker (built from its
// commit) on it, and migrates it to the newest version while that worker
// sends and a producer inserts by plain SQL, then rolls over to this
// code's worker: every intent to send is delivered once, every settled one keeps its
// state and is not delivered, and the new schema's features work after.
func TestUpgradeWhileWorking(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a release: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.CreateDB(t, pgtest.ServerURL(t), "upgrade"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.UpTo(ctx, pool, releaseVersion); err != nil {
		t.Fatalf("migrate to version %d: %v", releaseVersion, err)
	}

	body := func(key string) string {
		return fmt.Sprintf(`{"from":"billing@example.com","to":["%s@example.com"],"subject":"Invoice","text":"x"}`,
			strings.ReplaceAll(key, ":", "-"))
	}
	insert := func(key string, extra string) {
		t.Helper()
		pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ($1, $2)`, key, body(key))
		if extra != "" {
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET `+extra+` WHERE idempotency_key = $1`, key)
		}
	}
	// What the release left: the producers' rows (no job yet: the sweeper
	// gives them one), a scheduled one, one a crashed worker left sending,
	// and settled ones. (Runs came after the release.)
	var toSend []string
	for i := range 100 {
		key := fmt.Sprintf("pending:%d", i)
		insert(key, "")
		toSend = append(toSend, key)
	}
	insert("scheduled:1", "send_at = now() + interval '3 seconds'")
	toSend = append(toSend, "scheduled:1")
	insert("sending:1", "state = 'sending', attempts = 1, claimed_by = 2000000000, first_attempt_at = now()")
	toSend = append(toSend, "sending:1")
	settled := map[string]string{"sent:1": "sent", "failed:1": "failed", "canceled:1": "canceled"}
	insert("sent:1", "state = 'sent', attempts = 1, message_id = 'msg_old', sent_at = now()")
	insert("failed:1", "state = 'failed', attempts = 3, last_error = 'given up'")
	insert("canceled:1", "state = 'canceled'")

	fake := fakeapi.NewTest(t, fakeapi.Config{})
	deliveries := func() map[string]int {
		n := map[string]int{}
		for _, d := range fake.Deliveries() {
			n[d.IdempotencyKey]++
		}
		return n
	}
	startNew := func() {
		t.Helper()
		c, err := client.New(client.WithAPIKey(upgradeAPIKey), client.WithBaseURL(fake.URL()))
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 5, SweepInterval: 200 * time.Millisecond,
			FetchPollInterval: 200 * time.Millisecond, RestartGrace: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop(context.Background()) })
	}

	// The release's own worker sends while the database is migrated under
	// it: a worker of this code refuses a database with migrations pending,
	// so an upgrade migrates first, with the old workers running, and rolls
	// the workers after. Its binary is built from the release's commit.
	old := startRelease(t, ctx, pool, fake.URL(), releaseCommit)
	if old == nil {
		t.Log("the release's commit is not in this checkout's git history: migrating with no worker running " +
			"(a weaker test: nothing checks the release's worker against the new schema)")
	} else {
		await(t, "the release's worker's first sends", func() bool { return len(deliveries()) >= 10 })
	}

	// Migrate while the release's worker sends and a producer inserts by
	// plain SQL.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var during []string
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("during:%d", i)
			if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ($1, $2)`, key, body(key)); err != nil {
				t.Errorf("plain INSERT during the migration: %v", err)
				return
			}
			during = append(during, key)
			time.Sleep(5 * time.Millisecond) // a producer's pace, not a synchronisation
		}
	})
	before := len(deliveries())
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("migrate while the worker runs: %v", err)
	}
	close(stop)
	wg.Wait()
	t.Logf("applied sendonce migrations %v with %d intents delivered before, %d inserted by SQL meanwhile", res.Sendonce, before, len(during))
	if len(res.Sendonce) == 0 || res.Sendonce[len(res.Sendonce)-1] <= releaseVersion {
		t.Fatalf("Up applied %v, want the versions after %d", res.Sendonce, releaseVersion)
	}
	toSend = append(toSend, during...)
	if old != nil {
		// The release's worker goes on on the new schema until it has sent
		// more, then the rollout replaces it.
		n := len(deliveries())
		await(t, "the release's worker sending on the new schema", func() bool {
			return len(deliveries()) > n || len(deliveries()) >= len(toSend)
		})
	}
	startNew()
	if old != nil {
		old.stop(t)
	}

	// After the upgrade, the Go API enqueues with the new schema.
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "after:1", Payload: json.RawMessage(body("after:1"))})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	toSend = append(toSend, "after:1")

	await(t, "every intent sent and its job ended", func() bool {
		var left int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sendonce_outbox WHERE state IN ('pending', 'sending'))
			+ (SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled'))`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	got := deliveries()
	for _, key := range toSend {
		if got[key] != 1 {
			t.Errorf("intent %s delivered %d times, want once", key, got[key])
		}
	}
	for key, state := range settled {
		if got[key] != 0 {
			t.Errorf("settled intent %s delivered %d times", key, got[key])
		}
		var now string
		if err := pool.QueryRow(ctx, `SELECT state FROM sendonce_outbox WHERE idempotency_key = $1`, key).Scan(&now); err != nil || now != state {
			t.Errorf("intent %s: state %q (%v), want %q as before the upgrade", key, now, err, state)
		}
	}
	if len(got) != len(toSend) {
		t.Errorf("%d keys delivered, want %d", len(got), len(toSend))
	}
	var states map[string]int64
	rows, _ := pool.Query(ctx, `SELECT state, count(*) FROM sendonce_outbox GROUP BY state`)
	states = map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		states[s] = n
	}
	if int(states["sent"]) != len(toSend)+1 || states["failed"] != 1 || states["canceled"] != 1 {
		t.Errorf("states after the upgrade: %v, want %d sent, 1 failed, 1 canceled", states, len(toSend)+1)
	}

	// Retention works on the upgraded database.
	pr, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{})
	if err != nil || pr.Intents != len(toSend)+3 {
		t.Fatalf("Prune after the upgrade = %+v, %v; want %d intents", pr, err, len(toSend)+3)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "pending:0", Payload: json.RawMessage(body("pending:0"))})
		if err == nil && (!res.Existing || res.Record.PrunedAt == nil) {
			t.Errorf("Enqueue of a pruned key after the upgrade = %+v, want Existing from its tombstone", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// await polls cond until it holds, failing the test after 60 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
