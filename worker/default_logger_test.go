package worker_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// TestNilLoggerLogsToDefault: a worker with no Config.Logger logs through
// slog.Default(), as River does: its "sent" line reaches the program's
// default logger. (Not parallel: it swaps the process's default logger.)
func TestNilLoggerLogsToDefault(t *testing.T) {
	var logs syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	ctx := t.Context()
	pool, ob := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{})
	c, err := client.New(client.WithAPIKey("oe_test_default000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(pool, &worker.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "welcome:default-logger",
			Payload: `{"from":"hello@example.com","to":["ada@example.com"],"subject":"Welcome","text":"Hi."}`})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitDeliveries(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ob, 1)
	if err := w.Stop(ctx); err != nil { // the send's log line is written before Stop returns
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "msg=sent key=welcome:default-logger") {
		t.Fatalf("slog.Default() got no \"sent\" line for welcome:default-logger from a worker with a nil Logger; it got:\n%s", logs.String())
	}
}
