package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// benchDB returns a fresh migrated database with the plain baseline table,
// an Outbox over it, and intents for b.N with keys unique to this call.
func benchDB(b *testing.B) (*pgxpool.Pool, *outbox.Outbox) {
	b.Helper()
	pool := pgtest.NewDB(b)
	if err := createPlainTable(context.Background(), pool); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.New(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	return pool, ob
}

var benchRun int

func benchIntents(n int) []outbox.Intent {
	benchRun++
	return Intents(fmt.Sprintf("b%d", benchRun), n)
}

// BenchmarkEnqueueMany times EnqueueMany in transactions of 1,000 intents;
// ns/op is per intent.
func BenchmarkEnqueueMany(b *testing.B) {
	pool, ob := benchDB(b)
	intents := benchIntents(b.N)
	b.ResetTimer()
	if err := EnqueueIn(context.Background(), pool, ob, intents, 1000, true); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkEnqueue times Enqueue, one intent per transaction.
func BenchmarkEnqueue(b *testing.B) {
	pool, ob := benchDB(b)
	intents := benchIntents(b.N)
	b.ResetTimer()
	if err := EnqueueIn(context.Background(), pool, ob, intents, 1, false); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPlainInsertMany is BenchmarkEnqueueMany's baseline: the same
// rows, 1,000 per transaction, into a plain table of the outbox's shape.
func BenchmarkPlainInsertMany(b *testing.B) {
	pool, _ := benchDB(b)
	intents := benchIntents(b.N)
	b.ResetTimer()
	if err := PlainInsert(context.Background(), pool, intents, 1000); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkValidate times the Go-side validation every intent goes through
// before it is written.
func BenchmarkValidate(b *testing.B) {
	in := Intents("v", 1)[0]
	for b.Loop() {
		if err := in.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
