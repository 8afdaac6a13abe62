package outbox_test

// A canceled run takes no new member, whichever way it is enqueued (issue
// 22, hole 6): a plain-SQL INSERT with run_key is refused as EnqueueRun
// refuses it, also when it races CancelRun.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// insertMember inserts a run's member with plain SQL, as a producer in
// another language does.
func insertMember(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, run, key string) (pgconn.CommandTag, error) {
	return db.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key) VALUES ($1, 'email', $2, $3)
		ON CONFLICT (idempotency_key) DO NOTHING`, key, outboxtest.InvoiceBody, run)
}

// canceledWording is what both paths say of a new member of a canceled run.
func canceledWording(run string) (sql, goErr string) {
	return fmt.Sprintf("sendonce: cannot enqueue into run '%s': it is canceled: a canceled run takes no new members", run),
		fmt.Sprintf("outbox: cannot enqueue into run %q: it is canceled: a canceled run takes no new members", run)
}

// TestSQLMemberOfCanceledRun: a plain INSERT of a new member into a
// canceled run is refused with the Go API's rule and wording; one of its
// members inserted again is skipped (ON CONFLICT), as EnqueueRun answers
// it Existing; active and paused runs take new members.
func TestSQLMemberOfCanceledRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:c", Intents: members("campaign:c", 2)}); err != nil {
		t.Fatal(err)
	}
	if tag, err := insertMember(ctx, pool, "campaign:c", "campaign:c:sql-active"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("plain member of an active run: %v, %v; want it inserted", tag, err)
	}
	if _, err := ob.PauseRun(ctx, "campaign:c"); err != nil {
		t.Fatal(err)
	}
	if tag, err := insertMember(ctx, pool, "campaign:c", "campaign:c:sql-paused"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("plain member of a paused run: %v, %v; want it inserted", tag, err)
	}
	if _, err := ob.CancelRun(ctx, "campaign:c"); err != nil {
		t.Fatal(err)
	}

	wantSQL, wantGo := canceledWording("campaign:c")
	tag, err := insertMember(ctx, pool, "campaign:c", "campaign:c:sql-new")
	if err == nil || !strings.Contains(err.Error(), wantSQL) {
		t.Errorf("plain new member of a canceled run: %v, %v; want %q", tag, err, wantSQL)
	}
	// The Go path says the same.
	_, err = enqueueRun(t, pool, ob, outbox.Run{Key: "campaign:c", Intents: []outbox.Intent{{Key: "campaign:c:go-new", Payload: outboxtest.InvoiceBody}}})
	if !errors.Is(err, outbox.ErrRunCanceled) || err.Error() != wantGo {
		t.Errorf("EnqueueRun of a new member of a canceled run: %v; want %q", err, wantGo)
	}
	// Members already there are skipped, as the Go path answers them.
	for _, key := range []string{"campaign:c:0", "campaign:c:sql-active"} {
		if tag, err := insertMember(ctx, pool, "campaign:c", key); err != nil || tag.RowsAffected() != 0 {
			t.Errorf("plain INSERT of member %s of a canceled run again: %v, %v; want INSERT 0 0", key, tag, err)
		}
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = 'campaign:c' AND state <> 'canceled'`); n != 0 {
		t.Fatalf("%d members of the canceled run not canceled, want 0", n)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = 'campaign:c'`); n != 4 {
		t.Fatalf("%d members of the canceled run, want the 4 enqueued before the cancel", n)
	}
}

// holdCancelRun starts CancelRun of run and holds it, uncommitted, after
// it moved the run to canceled: a transaction locks one of its pending
// members, so CancelRun waits to cancel that member. release lets it
// commit and returns what it answered.
func holdCancelRun(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, run, member string) (release func() (*outbox.RunCancel, error)) {
	t.Helper()
	ctx := context.Background()
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM sendonce_outbox WHERE idempotency_key = $1 FOR UPDATE`, member); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res *outbox.RunCancel
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := ob.CancelRun(ctx, run)
		done <- answer{res, err}
	}()
	awaitLockWaits(t, pool, 1)
	return func() (*outbox.RunCancel, error) {
		if err := hold.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-done
		return a.res, a.err
	}
}

// TestMemberRacingCancelRun: a new member enqueued while CancelRun of its
// run is under way, with plain SQL or EnqueueRun, is either refused (the
// cancel committed first) or canceled with the others (the member
// committed first); never a pending member of a canceled run.
func TestMemberRacingCancelRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	paths := []struct {
		name    string
		enqueue func(tx pgx.Tx, run, key string) error
	}{
		{"SQL", func(tx pgx.Tx, run, key string) error {
			_, err := insertMember(ctx, tx, run, key)
			return err
		}},
		{"EnqueueRun", func(tx pgx.Tx, run, key string) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: run, Intents: []outbox.Intent{{Key: key, Payload: outboxtest.InvoiceBody}}})
			return err
		}},
	}
	for _, p := range paths {
		// The cancel first: the member waits for it, then is refused.
		run := "race:cancel-first:" + p.name
		if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: run, Intents: members(run, 2)}); err != nil {
			t.Fatal(err)
		}
		release := holdCancelRun(t, pool, ob, run, run+":1")
		done := make(chan error, 1)
		go func() {
			done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return p.enqueue(tx, run, run+":new") })
		}()
		awaitLockWaits(t, pool, 2)
		if res, err := release(); err != nil || res.Canceled != 2 {
			t.Fatalf("%s: CancelRun = %+v, %v; want 2 canceled", run, res, err)
		}
		err := <-done
		wantSQL, wantGo := canceledWording(run)
		if want := map[string]string{"SQL": wantSQL, "EnqueueRun": wantGo}[p.name]; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: a new member waiting for CancelRun: %v; want %q", run, err, want)
		}
		if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = $1 AND state <> 'canceled'`, run); n != 0 {
			t.Errorf("%s: %d members of the canceled run not canceled, want 0", run, n)
		}

		// The member first: CancelRun waits for it, then cancels it too.
		run = "race:member-first:" + p.name
		if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: run, Intents: members(run, 2)}); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.enqueue(tx, run, run+":new"); err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		type answer struct {
			res *outbox.RunCancel
			err error
		}
		canceled := make(chan answer, 1)
		go func() {
			res, err := ob.CancelRun(ctx, run)
			canceled <- answer{res, err}
		}()
		awaitLockWaits(t, pool, 1)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if a := <-canceled; a.err != nil || a.res.Canceled != 3 {
			t.Errorf("%s: CancelRun after a new member committed = %+v, %v; want 3 canceled", run, a.res, a.err)
		}
		if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = $1 AND state <> 'canceled'`, run); n != 0 {
			t.Errorf("%s: %d members of the canceled run not canceled, want 0", run, n)
		}
	}
}
