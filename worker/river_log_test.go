package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestRetryLoggedOnce: a send that fails and will be retried is logged
// once, by the worker ("send failed, will retry", WARN, with the key and
// the reason), for an intent with a River job of its own (a database
// upgraded from a release before the drain) as for a drained one: River's
// own line about the same error ("Job errored; retrying", INFO) no longer
// follows it. River's other lines still reach the logger.
func TestRetryLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, _ := e2eSetup(t)
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 500, Times: 2}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"invoice:own-job", "invoice:drained"}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, k := range keys {
			if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: k, Payload: outboxtest.InvoiceBody}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.GiveJobs(t, pool, keys[0])

	var logs syncbuf.Buffer
	w, err := worker.New(pool, &worker.Config{Client: c, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Send: worker.SendConfig{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, len(keys)); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ob, len(keys))
	if err := w.Stop(ctx); err != nil { // every line is written before Stop returns
		t.Fatal(err)
	}
	for _, k := range keys {
		if n := strings.Count(logs.String(), `msg="send failed, will retry" key=`+k+" "); n != 2 {
			t.Errorf("%s: %d \"send failed, will retry\" lines, want 2 (the API failed it twice):\n%s", k, n, logs.String())
		}
	}
	if strings.Contains(logs.String(), "Job errored") {
		t.Errorf("River logged the retries again:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "River client started") {
		t.Errorf("River's other lines are gone too:\n%s", logs.String())
	}
}
