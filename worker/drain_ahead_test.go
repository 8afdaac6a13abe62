package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// aheadSetup enqueues n invoices and returns a worker's config paced at
// rate by the fleet's budget, with concurrency slots.
func aheadSetup(t *testing.T, n int, rate string, concurrency int) (context.Context, *pgxpool.Pool, *outbox.Outbox, *fakeapi.Server, *worker.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{})
	c, err := client.New(client.WithAPIKey("oe_test_ahead0000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := worker.ParseRateLimits(rate)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			body := json.RawMessage(fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}`, i))
			if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: body}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pool, ob, fake, &worker.Config{Client: c, Concurrency: concurrency, RateLimits: limits}
}

// A worker paced by the budget claims, with each slot's intent, one for
// each slot about to get a leased token, and those slots send them; and
// the answers, which come one by one at the budget's pace, wait a little
// for one another to be recorded together. Far fewer claim statements and
// mark statements than intents (the intents of one claim share its
// transaction's first-attempt time, those of one mark their sent time),
// each intent delivered once, in one attempt.
func TestPacedDrainClaimsAheadAndRecordsTogether(t *testing.T) {
	t.Parallel()
	const n = 60
	ctx, pool, _, fake, cfg := aheadSetup(t, n, "40/s", 10)
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got := len(fake.Deliveries()); got != n {
		t.Fatalf("%d deliveries of %d intents, want one each", got, n)
	}
	var claims, sent, once int
	err := pool.QueryRow(ctx, `SELECT count(DISTINCT first_attempt_at), count(*) FILTER (WHERE state = 'sent'),
		count(*) FILTER (WHERE attempts = 1 AND tries = 1 AND NOT uncertain) FROM sendonce_outbox`).Scan(&claims, &sent, &once)
	if err != nil {
		t.Fatal(err)
	}
	// sent is recorded after the delivery: wait for the records.
	for sent < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // polls the table, which has no event to await
		_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'sent') FROM sendonce_outbox`).Scan(&sent)
	}
	var marks int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT sent_at) FROM sendonce_outbox`).Scan(&marks); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d intents: %d claim statements, %d mark statements, %d sent, %d in one attempt", n, claims, marks, sent, once)
	if sent != n || once != n {
		t.Fatalf("%d sent, %d in one attempt not uncertain; want all %d", sent, once, n)
	}
	if claims > n/2 {
		t.Fatalf("%d claims for %d intents: want at most %d, the slots waiting for a leased token taking intents claimed ahead", claims, n, n/2)
	}
	if marks > n/2 {
		t.Fatalf("%d marks for %d intents: want at most %d, the answers at a paced rate recorded together", marks, n, n/2)
	}
}

// A worker that stops with intents claimed ahead for slots that never got
// their token gives them back as they were: none is left sending, and
// those given back are pending, never attempted, not uncertain (a cancel
// may still take them); another worker sends them once each.
func TestDrainGivesBackClaimsAheadAtStop(t *testing.T) {
	t.Parallel()
	const n = 40
	ctx, pool, ob, fake, cfg := aheadSetup(t, n, "10/s", 8)
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped as soon as a claim leaves three ahead: the last of them
	// waits two tokens' spacing (200 ms) for its slot.
	aheadOf3 := make(chan struct{})
	var once sync.Once
	worker.SetAfterClaimAhead(w, func(n int) {
		if n >= 3 {
			once.Do(func() { close(aheadOf3) })
		}
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aheadOf3:
	case <-ctx.Done():
		t.Fatal("no claim left three intents ahead")
	}
	w.Stop(ctx)
	var sending, given, badGiven int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'sending'),
		count(*) FILTER (WHERE state = 'pending' AND updated_at <> created_at),
		count(*) FILTER (WHERE state = 'pending' AND (attempts <> 0 OR tries <> 0 OR uncertain OR first_attempt_at IS NOT NULL))
		FROM sendonce_outbox`).Scan(&sending, &given, &badGiven)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the stop: %d sending, %d given back, %d given back with an attempt counted", sending, given, badGiven)
	if sending != 0 || badGiven != 0 {
		t.Fatalf("after the stop: %d sending, %d pending with an attempt counted; want none", sending, badGiven)
	}
	if given == 0 {
		t.Fatalf("no intent was given back: the stop came with none claimed ahead, and the test proves nothing")
	}
	if _, err := ob.Cancel(ctx, firstGivenBack(ctx, t, pool)); err != nil {
		t.Fatalf("cancel an intent given back: %v; want it canceled (nothing of it reached the API)", err)
	}
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	if got := len(fake.Deliveries()); got != n-1 {
		t.Fatalf("%d deliveries, want %d: each intent once, the canceled one never", got, n-1)
	}
}

func firstGivenBack(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var key string
	if err := pool.QueryRow(ctx, `SELECT idempotency_key FROM sendonce_outbox WHERE state = 'pending' AND updated_at <> created_at
		ORDER BY id LIMIT 1`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// A run canceled while some of its members wait, claimed ahead, for slots
// (the cancel leaves a claimed member to its send) does not send them once
// they are given back: a member given back is canceled, as the cancel
// would have canceled it unclaimed. Nothing is left pending or sending,
// and the API received exactly the members recorded sent.
func TestRunCanceledWhileClaimedAheadSendsNoMore(t *testing.T) {
	t.Parallel()
	const n = 40
	ctx, pool, ob, fake, cfg := aheadSetup(t, 0, "10/s", 8)
	var in []outbox.Intent
	for i := range n {
		body := json.RawMessage(fmt.Sprintf(`{"from":"news@example.com","to":["r%d@example.com"],"subject":"Digest","text":"x"}`, i))
		in = append(in, outbox.Intent{Key: fmt.Sprintf("digest:%d", i), Payload: body})
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "digest", Intents: in})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	aheadOf3 := make(chan struct{})
	var once sync.Once
	worker.SetAfterClaimAhead(w, func(n int) {
		if n >= 3 {
			once.Do(func() { close(aheadOf3) })
		}
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aheadOf3:
	case <-ctx.Done():
		t.Fatal("no claim left three intents ahead")
	}
	if _, err := ob.CancelRun(ctx, "digest"); err != nil {
		t.Fatal(err)
	}
	w.Stop(ctx)
	var pending, sending, sent int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'sending'),
		count(*) FILTER (WHERE state = 'sent') FROM sendonce_outbox WHERE run_key = 'digest'`).Scan(&pending, &sending, &sent)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the cancel and the stop: %d pending, %d sending, %d sent, %d delivered", pending, sending, sent, len(fake.Deliveries()))
	if pending != 0 || sending != 0 {
		t.Fatalf("%d members pending and %d sending after the run's cancel and the stop; want none: a member claimed ahead "+
			"and given back must be canceled, not sent later", pending, sending)
	}
	if got := len(fake.Deliveries()); got != sent {
		t.Fatalf("%d deliveries, %d members recorded sent; want as many", got, sent)
	}
}
