package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/worker"
)

// DrainJobless is DrainOutbox for intents with no River job of their own:
// p.N rows inserted as a producer in another language inserts them (plain
// SQL, in transactions of 1,000, not timed), then drained by a sendonce
// worker's drain: claimed in batches, sent, marked, with no River job per
// intent (issue 44). The clock stops at the last intent recorded sent.
func DrainJobless(ctx context.Context, env *Env, p DrainParams) (DrainResult, error) {
	if err := env.Reset(ctx); err != nil {
		return DrainResult{}, err
	}
	if _, err := env.WarmBudget(ctx); err != nil {
		return DrainResult{}, err
	}
	fake, err := StartFake(p.Latency, p.Concurrency)
	if err != nil {
		return DrainResult{}, err
	}
	defer fake.Close()
	pool, _, err := env.NewOutbox(ctx, env.PoolConns)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	intents := Intents("drain", p.N)
	for len(intents) > 0 {
		n := min(1000, len(intents))
		keys, payloads := make([]string, n), make([]string, n)
		for i, in := range intents[:n] {
			keys[i], payloads[i] = in.Key, string(in.Payload.([]byte))
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload)
				SELECT k, 'email', p::jsonb FROM unnest($1::text[], $2::text[]) AS u(k, p)`, keys, payloads)
			return err
		})
		if err != nil {
			return DrainResult{}, fmt.Errorf("bench: insert by SQL: %w", err)
		}
		intents = intents[n:]
	}
	if err := env.Checkpoint(ctx); err != nil {
		return DrainResult{}, err
	}
	// The drain's sends end in the observer, after their record: each
	// stands for a completed job in timeDrain's count.
	events := make(chan *river.Event, p.N+1000)
	observe := worker.ObserverFunc(func(o worker.Outcome) {
		switch o.Result {
		case worker.ResultSent, worker.ResultReplayed:
			events <- &river.Event{Kind: river.EventKindJobCompleted, Job: &rivertype.JobRow{}}
		case worker.ResultFailed, worker.ResultExpired, worker.ResultSuppressed:
			events <- &river.Event{Kind: river.EventKindJobCancelled, Job: &rivertype.JobRow{}}
		}
	})
	w, err := worker.New(pool, &worker.Config{
		Client:        fake.Client,
		Concurrency:   p.Concurrency,
		FetchCooldown: p.FetchCooldown,
		Logger:        discard,
		Send:          worker.SendConfig{Observer: observe},
	})
	if err != nil {
		return DrainResult{}, err
	}
	res, err := timeDrain(ctx, env, p, events, w.Start, w.Stop)
	return checkDrained(ctx, env, fake, p, res, err)
}
