package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestRetention sends 20,000 intents, then prunes every settled one
// (`sendonce prune --retain 0`) while producers enqueue half of the pruned
// keys again with the same payload (Go API and plain SQL) and 100 with
// another: nothing is sent again, the 100 are key-reuse errors, and the
// outbox holds only what is unsettled. It logs the sizes after VACUUM.
func TestRetention(t *testing.T) {
	setup(t)
	if !hasFlag(t, "work", "retain") {
		t.Fatal("sendonce work has no --retain flag")
	}
	start := time.Now()
	ctx := context.Background()
	n := 20000
	srv := newFake(t, "retention")
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "retention")
	e := processEnv(dbURL, srv)

	intents := make([]intent, n)
	for i := range intents {
		intents[i] = emailIntent(fmt.Sprintf("ret-%d:%05d", suite.seed, i), fmt.Sprintf("ret-%05d@example.test", i))
	}
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueueMany := func(part []intent) ([]*outbox.EnqueueResult, error) {
		ins := make([]outbox.Intent, len(part))
		for i, in := range part {
			ins[i] = in.outboxIntent()
		}
		var res []*outbox.EnqueueResult
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = ob.EnqueueMany(ctx, tx, ins)
			return err
		})
		return res, err
	}
	for i := 0; i < n; i += 1000 {
		if _, err := enqueueMany(intents[i : i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	worker := startWorker(t, "worker", e, workerOptions{Concurrency: 50})
	waitAllSent(t, pool, n, 5*time.Minute, nil)
	sentAt := time.Since(start)
	delivered := len(srv.Deliveries())
	if delivered != n {
		t.Fatalf("%d deliveries for %d intents", delivered, n)
	}
	outboxBefore := relationSize(t, pool, "sendonce_outbox")

	// Prune everything settled while the producers come back.
	prune := startProc(t, "prune", e, "prune", "--retain", "0")
	var wg sync.WaitGroup
	var existing, pruned, reuse, sqlSkipped, sqlTakenBack, sqlInserted int
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf(format, args...)
	}
	// Half the keys again, same payload: 9,800 by the Go API, 200 by SQL.
	wg.Go(func() {
		for i := 0; i < n/2-200; i += 100 {
			res, err := enqueueMany(intents[i : i+100])
			if err != nil {
				fail("re-enqueue %d..%d: %v", i, i+100, err)
				return
			}
			mu.Lock()
			for _, r := range res {
				if r.Existing {
					existing++
				}
				if r.Record.PrunedAt != nil {
					pruned++
				}
			}
			mu.Unlock()
		}
	})
	wg.Go(func() {
		for _, in := range intents[n/2-200 : n/2] {
			tag, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ($1, $2, $3)
				ON CONFLICT (idempotency_key) DO NOTHING`, in.Key, string(in.Kind), string(in.Payload))
			if err != nil {
				fail("plain INSERT of %s again: %v", in.Key, err)
				return
			}
			// An insert that raced the prune of its key (it waited on the
			// old row, which the prune deleted) goes in, and the trigger
			// after it finds the tombstone and takes it back: the command
			// tag still counts it. A row that stayed would be there now.
			there := false
			if tag.RowsAffected() > 0 {
				if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sendonce_outbox WHERE idempotency_key = $1)`, in.Key).Scan(&there); err != nil {
					fail("look up %s: %v", in.Key, err)
					return
				}
			}
			mu.Lock()
			switch {
			case tag.RowsAffected() == 0:
				sqlSkipped++
			case there:
				sqlInserted++
			default:
				sqlTakenBack++
			}
			mu.Unlock()
		}
	})
	// 100 keys of the other half with another payload.
	wg.Go(func() {
		for _, in := range intents[n-100:] {
			other := emailIntent(in.Key, "someone-else@example.test")
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.Enqueue(ctx, tx, other.outboxIntent())
				return err
			})
			var kr *outbox.KeyReuseError
			switch {
			case errors.As(err, &kr) && kr.Key == in.Key:
				mu.Lock()
				reuse++
				mu.Unlock()
			default:
				fail("enqueue of %s with another payload: %v, want a key-reuse error", in.Key, err)
			}
		}
	})
	wg.Wait()
	select {
	case <-prune.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("sendonce prune did not finish within 2 minutes")
	}
	if code := exitCode(prune.err); code != 0 {
		t.Fatalf("sendonce prune: exit %d\n%s", code, prune.output())
	}
	t.Logf("prune: %s", prune.stdout.String())

	// Anything that got a row again would be pending, and the worker would
	// send it: wait until nothing is unsettled and no job is left to run.
	waitFor(t, time.Minute, "nothing unsettled", func() (bool, string) {
		o, err := outboxStates(ctx, pool)
		if err != nil {
			return false, err.Error()
		}
		j, err := jobStates(ctx, pool)
		if err != nil {
			return false, err.Error()
		}
		return o["pending"]+o["sending"] == 0 && j["available"]+j["running"]+j["retryable"]+j["scheduled"] == 0,
			fmt.Sprintf("outbox %s, river_job %s", o, j)
	})
	worker.stop(t)

	if got := len(srv.Deliveries()); got != delivered {
		t.Errorf("the fake API's ledger holds %d deliveries after the prune, %d before: %d sent again", got, delivered, got-delivered)
	}
	if reuse != 100 {
		t.Errorf("%d key-reuse errors, want 100", reuse)
	}
	if existing != n/2-200 || sqlSkipped+sqlTakenBack != 200 || sqlInserted != 0 {
		t.Errorf("re-enqueued: %d existing of %d by Go, SQL %d skipped, %d taken back by the trigger and %d inserted of 200",
			existing, n/2-200, sqlSkipped, sqlTakenBack, sqlInserted)
	}
	var rows, unsettled, tombstones int
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('pending', 'sending')),
		(SELECT count(*) FROM sendonce_tombstone) FROM sendonce_outbox`).Scan(&rows, &unsettled, &tombstones)
	if err != nil {
		t.Fatal(err)
	}
	if rows != unsettled {
		t.Errorf("the outbox holds %d rows after the prune, %d of them unsettled", rows, unsettled)
	}
	if tombstones != n {
		t.Errorf("%d tombstones for %d pruned intents", tombstones, n)
	}

	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) sendonce_outbox, sendonce_tombstone, sendonce_event`); err != nil {
		t.Fatal(err)
	}
	outboxAfter, tombSize := relationSize(t, pool, "sendonce_outbox"), relationSize(t, pool, "sendonce_tombstone")
	t.Logf("sendonce_outbox: %d rows, %d bytes with indexes and TOAST before the prune (20,000 sent), %d bytes after the prune and VACUUM",
		n, outboxBefore, outboxAfter)
	t.Logf("sendonce_tombstone: %d rows, %d bytes after VACUUM: %.1f bytes per tombstone", tombstones, tombSize, float64(tombSize)/float64(tombstones))
	summary(t, "retention: seed=%d intents=%d sent_in=%s re_enqueued=%d (existing %d, from tombstones %d, sql skipped %d, sql taken back %d) key_reuse=%d new_sends=%d outbox_rows=%d outbox_bytes=%d->%d tombstone_bytes=%d (%.1f/row) elapsed=%s",
		suite.seed, n, sentAt.Round(time.Second), n/2, existing, pruned, sqlSkipped, sqlTakenBack, reuse, len(srv.Deliveries())-delivered, rows,
		outboxBefore, outboxAfter, tombSize, float64(tombSize)/float64(tombstones), time.Since(start).Round(time.Second))
}

// relationSize is pg_total_relation_size of a table: heap, indexes, TOAST,
// free space and visibility maps.
func relationSize(t testing.TB, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) int64 {
	t.Helper()
	var size int64
	if err := pool.QueryRow(context.Background(), `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&size); err != nil {
		t.Fatal(err)
	}
	return size
}
