package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// EndToEnd is scenario 4: the time from the commit of the application's
// transaction to the email's delivery at the API, at a steady moderate
// rate with a worker already running, as an application would see it.
// The rate is offered twice to one worker: first in a new API key's first
// seconds, when the send budget is in slow start (10/s, doubling with use),
// then for as long again, when it has found its rate, as a fleet that has
// been running has.
type EndToEnd struct {
	rate      float64       // intents per second offered
	dur       time.Duration // how long they are offered, each time
	producers int           // goroutines enqueueing, one transaction each intent
	p50, p99  *Row
	coldP99   *Row
	max       Samples
	achieved  Samples
	// Where the time goes, per run: the queue wait (insert to first
	// claim) and run time (claim, HTTP call, recorded sent), from the rows.
	waitP50, waitP99, runP50, runP99 Samples
	poolConns                        int
}

// NewEndToEnd returns scenario 4; quick offers the rate for less time.
func NewEndToEnd(quick bool) *EndToEnd {
	s := &EndToEnd{rate: 200, dur: 10 * time.Second, producers: 8}
	if quick {
		s.dur = 4 * time.Second
	}
	measure := func(p string) string {
		return fmt.Sprintf("%s, commit → delivered, %s/s for %s, worker defaults, after the %s of a new API key", p, Thousands(s.rate), s.dur, s.dur)
	}
	s.p50 = &Row{Scenario: "4. End-to-end latency", Measure: measure("p50"), Unit: Millis}
	s.p99 = &Row{Scenario: "4. End-to-end latency", Measure: measure("p99"), Unit: Millis,
		Goal: Goal{Text: "< 250 ms", Check: Below(250)}}
	s.coldP99 = &Row{Scenario: "4. End-to-end latency", Unit: Millis,
		Measure: fmt.Sprintf("p99, the same in a new API key's first %s (the send budget in slow start)", s.dur)}
	return s
}

// Name is "e2e".
func (s *EndToEnd) Name() string { return "e2e" }

// Rows are p50 and p99 once the budget has found its rate, and p99 before.
func (s *EndToEnd) Rows() []*Row { return []*Row{s.p50, s.p99, s.coldP99} }

// Run starts a worker, offers the rate twice, and records the percentiles.
func (s *EndToEnd) Run(ctx context.Context, env *Env) error {
	if err := env.Reset(ctx); err != nil {
		return err
	}
	fake, err := StartFake(0, worker.DefaultConcurrency)
	if err != nil {
		return err
	}
	defer fake.Close()
	workerPool, err := env.NewPool(ctx, env.PoolConns)
	if err != nil {
		return err
	}
	defer workerPool.Close()
	w, err := worker.New(workerPool, &worker.Config{Client: fake.Client, Logger: discard})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	s.poolConns = env.PoolConns
	// A worker in production has long been running: let this one elect
	// its leader and start listening for insert notifications first, or
	// the first intents wait for River's one-second poll.
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	}()
	appPool, ob, err := env.NewOutbox(ctx, s.producers)
	if err != nil {
		return err
	}
	defer appPool.Close()

	cold, err := s.offer(ctx, env, ob, appPool, fake, "e2e-cold")
	if err != nil {
		return err
	}
	s.coldP99.Value.Add(ms(Percentile(cold.lat, 99)))
	steady, err := s.offer(ctx, env, ob, appPool, fake, "e2e")
	if err != nil {
		return err
	}
	p50, p99, pmax := Percentile(steady.lat, 50), Percentile(steady.lat, 99), Percentile(steady.lat, 100)
	s.waitP50.Add(ms(Percentile(steady.waits, 50)))
	s.waitP99.Add(ms(Percentile(steady.waits, 99)))
	s.runP50.Add(ms(Percentile(steady.runs, 50)))
	s.runP99.Add(ms(Percentile(steady.runs, 99)))
	s.p50.Value.Add(ms(p50))
	s.p99.Value.Add(ms(p99))
	s.max.Add(ms(pmax))
	s.achieved.Add(steady.rate)
	return nil
}

// offered is what one offer measured: each intent's latency, queue wait
// and run time, and the rate achieved.
type offered struct {
	lat, waits, runs []time.Duration
	rate             float64
}

// offer enqueues intents (keys prefix:N) at s.rate for s.dur on an
// open-loop schedule, waits for their deliveries and River's completion
// intents' rows, and returns what it measured.
func (s *EndToEnd) offer(ctx context.Context, env *Env, ob *outbox.Outbox, appPool *pgxpool.Pool, fake *Fake,
	prefix string) (offered, error) {
	n := int(s.rate * s.dur.Seconds())
	intents := Intents(prefix, n)
	index := make(map[string]int, n)
	for i, in := range intents {
		index[in.Key] = i
	}
	committed := make([]time.Time, n)
	errs := make([]error, s.producers)
	next := make(chan int)
	var wg sync.WaitGroup
	for p := range s.producers {
		wg.Go(func() {
			for i := range next {
				err := pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
					_, err := ob.Enqueue(ctx, tx, intents[i])
					return err
				})
				if err != nil {
					errs[p] = err
					continue
				}
				committed[i] = time.Now()
			}
		})
	}
	// An open-loop schedule: intent i is offered at start + i/rate whether
	// or not earlier ones are done, as independent requests to an
	// application would arrive.
	before := len(fake.Server.Deliveries())
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))))
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return offered{}, fmt.Errorf("bench: enqueue: %w", err)
		}
	}

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := fake.Server.WaitDeliveries(waitCtx, before+n); err != nil {
		return offered{}, fmt.Errorf("bench: waiting for %d deliveries: %w", n, err)
	}
	out := offered{rate: Rate(n, took)}
	for _, d := range fake.Server.Deliveries()[before:] {
		i, ok := index[d.IdempotencyKey]
		if !ok {
			return offered{}, fmt.Errorf("bench: unexpected delivery with key %q", d.IdempotencyKey)
		}
		out.lat = append(out.lat, d.DeliveredAt.Sub(committed[i]))
	}
	if len(out.lat) != n {
		return offered{}, fmt.Errorf("bench: %d deliveries for %d intents", len(out.lat), n)
	}
	// Where the time went, from each intent's row: the wait from its
	// insert to its first claim, and the run from the claim to its record
	// sent (the API call and the batched mark). A delivery is recorded a
	// moment after the fake made it: wait for the records.
	for {
		var sent int
		if err := env.Admin.QueryRow(waitCtx, `SELECT count(*) FROM sendonce_outbox WHERE starts_with(idempotency_key, $1) AND state = 'sent'`,
			prefix+":").Scan(&sent); err != nil {
			return offered{}, fmt.Errorf("bench: count the intents sent: %w", err)
		}
		if sent == n {
			break
		}
		if err := sleepCtx(waitCtx, 10*time.Millisecond); err != nil {
			return offered{}, fmt.Errorf("bench: %d of %d intents recorded sent: %w", sent, n, err)
		}
	}
	rows, err := env.Admin.Query(waitCtx, `SELECT first_attempt_at - created_at, sent_at - first_attempt_at
		FROM sendonce_outbox WHERE starts_with(idempotency_key, $1) AND state = 'sent'`, prefix+":")
	if err != nil {
		return offered{}, fmt.Errorf("bench: read the intents' times: %w", err)
	}
	for rows.Next() {
		var wait, run time.Duration
		if err := rows.Scan(&wait, &run); err != nil {
			rows.Close()
			return offered{}, fmt.Errorf("bench: read the intents' times: %w", err)
		}
		out.waits, out.runs = append(out.waits, wait), append(out.runs, run)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(out.waits) != n {
		return offered{}, fmt.Errorf("bench: %d of %d intents' times read: %v", len(out.waits), n, err)
	}
	env.Logf("e2e (%s): %d intents at %.0f/s: p50 %s, p99 %s, max %s; queue wait p50 %s p99 %s, run p50 %s p99 %s",
		prefix, n, out.rate, Percentile(out.lat, 50), Percentile(out.lat, 99), Percentile(out.lat, 100),
		Percentile(out.waits, 50), Percentile(out.waits, 99), Percentile(out.runs, 50), Percentile(out.runs, 99))
	return out, nil
}

// settle is how long the worker runs before intents are offered.
const settle = time.Second

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Notes describe the measurement.
func (s *EndToEnd) Notes() []string {
	return []string{fmt.Sprintf("**4. End-to-end latency.** A worker with its defaults (concurrency %d, fetch cooldown %s, "+
		"pool of %d) runs against the fake API (no added latency); after it has run for %s, %d goroutines enqueue intents on an open-loop "+
		"schedule of %s/s for %s, each with `Enqueue` in a transaction of its own; the commit time is taken when "+
		"Commit returns, the delivery time is the fake's `Delivery.DeliveredAt` (same clock). The rate is offered twice, one "+
		"offer after the other is delivered: first from a new API key, whose send budget starts in slow start (10/s, doubling "+
		"while the fleet uses it all; the row 'in a new API key's first' seconds), then again, once the budget has found its rate, "+
		"as a fleet that has been running has (the p50 and p99 rows). Of that second offer: achieved rate %s/s (median); "+
		"worst delivery %s (median of runs' maxima). Where the time goes, from the intents' rows (medians of runs): "+
		"queue wait (insert to first claim) p50 %s, p99 %s; run (claim to recorded sent: the API call and the mark) p50 %s, p99 %s.",
		worker.DefaultConcurrency, worker.DefaultFetchCooldown, s.poolConns, settle, s.producers, Thousands(s.rate), s.dur,
		Thousands(s.achieved.Median()), Millis.Format(s.max.Median()),
		Millis.Format(s.waitP50.Median()), Millis.Format(s.waitP99.Median()), Millis.Format(s.runP50.Median()), Millis.Format(s.runP99.Median()))}
}
