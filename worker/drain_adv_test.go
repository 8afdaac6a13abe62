package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// settled waits until n outcomes that end an intent (sent, replayed,
// failed, expired) have been observed.
func (r *results) settled(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		r.mu.Lock()
		got := r.n[worker.ResultSent] + r.n[worker.ResultReplayed] + r.n[worker.ResultFailed] + r.n[worker.ResultExpired]
		ch := r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %d settled outcomes: %d", n, got)
		}
	}
}

// SendConfig.MaxAttempts: "Snoozes do not count." A drained intent (plain
// SQL, no River job) the API rate-limits a few times (429, Retry-After)
// and then answers one 503 must be retried and delivered, as the same
// intent sent by a River job is: the 429 snoozes are not attempts.
func TestAdvDrainedSnoozesDoNotCountAsAttempts(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, _, _ := e2eSetup(t)
	var faults []fakeapi.Fault
	for _, spec := range []string{
		"retry_after=0.1:times=6:to=sql@", "error_before=503:times=1:to=sql@",
		"retry_after=0.1:times=6:to=riv@", "error_before=503:times=1:to=riv@",
	} {
		f, err := fakeapi.ParseFault(spec)
		if err != nil {
			t.Fatal(err)
		}
		faults = append(faults, f)
	}
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: faults})
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	insertSQL(t, pool, "sql:limited", "sql@example.com")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "go:limited",
			Payload: json.RawMessage(`{"from":"billing@example.com","to":["riv@example.com"],"subject":"Invoice","text":"x"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, Send: worker.SendConfig{
		MaxAttempts: 3, RetryBase: 50 * time.Millisecond, RateLimitWait: 200 * time.Millisecond, Observer: seen}})
	seen.settled(t, ctx, 2)
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, attempts, snoozes, coalesce(last_error, ''), job_id IS NULL FROM sendonce_outbox ORDER BY idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, state, lastErr string
		var attempts, snoozes int
		var drained bool
		if err := rows.Scan(&key, &state, &attempts, &snoozes, &lastErr, &drained); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s, attempts %d, snoozes %d, drained %v, last error %q", key, state, attempts, snoozes, drained, lastErr)
		if state != "sent" {
			t.Errorf("%s (drained %v) is %s, want sent: 429 snoozes counted against MaxAttempts 3 (%s)", key, drained, state, lastErr)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Deliveries()); n != outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) {
		t.Errorf("%d deliveries for the sent rows", n)
	}
}
