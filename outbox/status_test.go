package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Config.OnStatus is told of the intents an Outbox cancels, alone or as a
// run's members, in the cancel's transaction; an error from it leaves
// nothing canceled.
func TestOnStatusTellsCancels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	var told []string
	var fail error
	ob, err := outbox.New(pool, &outbox.Config{OnStatus: func(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
		for _, s := range statuses {
			told = append(told, s.Key+":"+string(s.Transition)+":"+s.RunKey)
		}
		return fail
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "invoice:1", Payload: outboxtest.InvoiceBody}); err != nil {
			return err
		}
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "digest", Intents: []outbox.Intent{
			{Key: "digest:a", Payload: outboxtest.InvoiceBody}, {Key: "digest:b", Payload: outboxtest.InvoiceBody}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	fail = errors.New("the books are closed")
	if _, err := ob.Cancel(ctx, "invoice:1"); err == nil || !strings.Contains(err.Error(), "the books are closed") {
		t.Fatalf("Cancel with a failing hook: %v, want its error", err)
	}
	if rec := outboxtest.Get(t, ob, "invoice:1"); rec.State != outbox.StatePending {
		t.Fatalf("the hook failed, but the intent is %s", rec.State)
	}
	fail, told = nil, nil
	if _, err := ob.Cancel(ctx, "invoice:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.CancelRun(ctx, "digest"); err != nil {
		t.Fatal(err)
	}
	slices.Sort(told)
	if want := []string{"digest:a:canceled:digest", "digest:b:canceled:digest", "invoice:1:canceled:"}; !slices.Equal(told, want) {
		t.Fatalf("told %v, want %v", told, want)
	}
}
