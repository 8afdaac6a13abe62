package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// Running the worker inside one's own program, beside the code that
// enqueues: here against the fake API, where a program would use
// client.New() with OPENEMAIL_API_KEY (or worker.New(pool, nil)).
func Example_runInYourProgram() {
	ctx := context.Background()
	pool, done := pgtest.ExampleDB() // in your program: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer done()
	api := fakeapi.New(fakeapi.Config{})
	url, err := api.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer api.Shutdown(ctx)

	c, err := client.New(client.WithAPIKey("oe_test_example0000000000"), client.WithBaseURL(url))
	if err != nil {
		panic(err)
	}
	// The observer hears each send's outcome once it is recorded.
	sent := make(chan struct{}, 1)
	observer := worker.ObserverFunc(func(o worker.Outcome) {
		if o.Result == worker.ResultSent {
			select {
			case sent <- struct{}{}:
			default:
			}
		}
	})
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 10, Send: worker.SendConfig{Observer: observer}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	// On shutdown, sends in flight get a grace period to finish.
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	}()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{
			Key:     "welcome:user_17",
			Payload: `{"from":"hello@example.com","to":["ada@example.com"],"subject":"Welcome","text":"Hi Ada."}`,
		})
		return err
	})
	if err != nil {
		panic(err)
	}

	<-sent // the intent is recorded as sent
	rec, err := ob.Get(ctx, "welcome:user_17")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Key, rec.State, "replayed:", rec.Replayed, "deliveries:", len(api.Deliveries()))
	// Output:
	// welcome:user_17 sent replayed: false deliveries: 1
}
