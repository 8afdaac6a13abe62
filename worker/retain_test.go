package worker_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/worker"
)

// TestRetain runs retention in the worker: sent intents go once past
// Retain, each leaving its key's tombstone.
func TestRetain(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	start(t, pool, &worker.Config{Client: c, Concurrency: 5, Retain: time.Millisecond, PruneInterval: 50 * time.Millisecond})
	for i := range 5 {
		enqueue(ctx, t, pool, ob, fmt.Sprintf("ret:%d", i),
			json.RawMessage(fmt.Sprintf(`{"from":"a@example.com","to":["r%d@example.com"],"subject":"s","text":"x"}`, i)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := outboxtest.Value[int64](t, pool, `SELECT count(*) FROM sendonce_outbox`)
		tombs := outboxtest.Value[int64](t, pool, `SELECT count(*) FROM sendonce_tombstone`)
		if rows == 0 && tombs == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d rows, %d tombstones; want 0 and 5", rows, tombs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(fake.Deliveries()); n != 5 {
		t.Fatalf("%d deliveries, want 5", n)
	}
	if _, err := worker.New(pool, &worker.Config{Client: c, Retain: -time.Second}); err == nil {
		t.Fatal("worker.New with a negative Retain did not fail")
	}
}
