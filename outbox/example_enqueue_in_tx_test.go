package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// The invoice and its email commit together: if the transaction rolls back,
// no email is ever sent; if it commits, the workers send it exactly once,
// under the key derived from the invoice.
func ExampleOutbox_Enqueue() {
	ctx := context.Background()
	pool, done := pgtest.ExampleDB() // in your program: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, customer text)`); err != nil {
		panic(err)
	}

	ob, err := outbox.New(pool, nil)
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ('inv_4192', 'ada@example.com')`); err != nil {
			return err
		}
		res, err := ob.Enqueue(ctx, tx, outbox.Intent{
			Key: "invoice:inv_4192", // from the cause of the send, never a clock
			Payload: map[string]any{
				"from":    "billing@example.com",
				"to":      []string{"ada@example.com"},
				"subject": "Your invoice inv_4192",
				"text":    "Thank you for your order.",
			},
		})
		if err != nil {
			return err
		}
		fmt.Println("enqueued", res.Record.Key, res.Record.State)
		return nil
	})
	if err != nil {
		panic(err)
	}

	// Enqueueing it again (a retried request, a re-run billing job) finds
	// the same intent and sends nothing more. Payloads are compared as
	// JSON: key order and spacing do not matter.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Intent{
			Key:     "invoice:inv_4192",
			Payload: `{"from":"billing@example.com","to":["ada@example.com"],"subject":"Your invoice inv_4192","text":"Thank you for your order."}`,
		})
		if err != nil {
			return err
		}
		fmt.Println("existing:", res.Existing)
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// enqueued invoice:inv_4192 pending
	// existing: true
}
