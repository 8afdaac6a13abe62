package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// BenchmarkEnqueueMany is one EnqueueMany of 1,000 new email intents per
// transaction (the COPY path), like the bench's (cmd/internal/bench): its
// allocations are the Go side's, its time the database's too.
func BenchmarkEnqueueMany(b *testing.B) {
	pool, ob := outboxtest.New(b)
	ctx := context.Background()
	round := 0
	intents := func() []outbox.Intent {
		in := make([]outbox.Intent, 1000)
		for i := range in {
			in[i] = outbox.Intent{Key: fmt.Sprintf("bench%d:%d", round, i), Kind: outbox.KindEmail, Payload: fmt.Appendf(nil,
				`{"from":"Shop <orders@shop.example.com>","to":["customer%d@example.com"],`+
					`"subject":"Your order #%d has shipped","text":"Hello, your order #%d is on its way. `+
					`Track it at https://shop.example.com/orders/%d. Thank you for shopping with us."}`, i, i, i, i)}
		}
		round++
		return in
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		in := intents()
		b.StartTimer()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueMany(ctx, tx, in)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
