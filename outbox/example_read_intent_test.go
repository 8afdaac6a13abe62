package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Reading an intent: where it stands, and what the API said of it once
// sent.
func ExampleOutbox_Get() {
	ctx := context.Background()
	pool, done := pgtest.ExampleDB()
	defer done()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{
			Key:     "password-reset:user_7:token_abc",
			Payload: `{"from":"security@example.com","to":"ada@example.com","subject":"Reset your password","text":"…"}`,
		})
		return err
	})
	if err != nil {
		panic(err)
	}

	rec, err := ob.Get(ctx, "password-reset:user_7:token_abc")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Key, rec.Kind, rec.State, "attempts:", rec.Attempts)
	if rec.State == outbox.StateSent {
		fmt.Println("message", rec.MessageID, "replayed:", rec.Replayed)
	}

	_, err = ob.Get(ctx, "password-reset:user_8:token_xyz")
	fmt.Println(err)
	// Output:
	// password-reset:user_7:token_abc email pending attempts: 0
	// outbox: no intent with that key: "password-reset:user_8:token_xyz"
}
