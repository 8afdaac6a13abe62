package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestPollOnly drains with and without PollOnly and measures the delay from
// an intent's commit to its delivery at the fake API. A poll-only worker
// must not LISTEN, and still sends every intent (Go API and plain SQL)
// within a poll interval or so; the default one sends at once.
func TestPollOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of real waiting: make test runs it, make check (-short) does not")
	}
	t.Parallel()
	const n = 12
	for _, pollOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll-only=%t", pollOnly), func(t *testing.T) {
			ctx, pool, ob, fake, c := e2eSetup(t)
			start(t, pool, &worker.Config{Client: c, Concurrency: 10, PollOnly: pollOnly,
				FetchPollInterval: time.Second, SweepInterval: time.Second})
			delivered := func(key string) (time.Time, bool) {
				for _, d := range fake.Deliveries() {
					if d.IdempotencyKey == key {
						return d.DeliveredAt, true
					}
				}
				return time.Time{}, false
			}
			await := func(key string) time.Time {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					if at, ok := delivered(key); ok {
						return at
					}
					time.Sleep(2 * time.Millisecond)
				}
				t.Fatalf("%s not delivered within 10 s", key)
				return time.Time{}
			}
			body := func(i int) json.RawMessage {
				return json.RawMessage(fmt.Sprintf(`{"from":"a@example.com","to":["p%d@example.com"],"subject":"s","text":"x"}`, i))
			}
			// Warm up: River's leader elected, its producer fetching.
			enqueue(ctx, t, pool, ob, "warm", body(-1))
			await("warm")

			var delays []time.Duration
			for i := range n {
				key := fmt.Sprintf("lat:%d", i)
				committed := enqueue(ctx, t, pool, ob, key, body(i))
				delays = append(delays, await(key).Sub(committed))
				// Commits land at different points of the poll cycle.
				time.Sleep(time.Duration(i*263%1000) * time.Millisecond)
			}
			// A row inserted by plain SQL: the sweeper finds it.
			if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('sql:1', $1)`, string(body(100))); err != nil {
				t.Fatal(err)
			}
			sqlCommitted := time.Now()
			sqlDelay := await("sql:1").Sub(sqlCommitted)

			var listeners int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %'`).Scan(&listeners); err != nil {
				t.Fatal(err)
			}
			slices.Sort(delays)
			median, worst := delays[n/2], delays[n-1]
			t.Logf("poll-only=%t: commit to delivery over %d intents: median %s, max %s; a plain-SQL row: %s; sessions LISTENing: %d",
				pollOnly, n, median.Round(time.Millisecond), worst.Round(time.Millisecond), sqlDelay.Round(time.Millisecond), listeners)
			switch {
			case pollOnly && listeners > 0:
				t.Errorf("%d sessions LISTEN with PollOnly", listeners)
			case !pollOnly && listeners == 0:
				t.Errorf("no session LISTENs without PollOnly: the check cannot tell the modes apart")
			}
			// The delays are a measurement (docs/poolers.md quotes them), not
			// an assertion: on a loaded machine they move.
		})
	}
}

// enqueue commits one intent and returns the time of the commit.
func enqueue(ctx context.Context, t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, key string, body json.RawMessage) time.Time {
	t.Helper()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: body})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}
