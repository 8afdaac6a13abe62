package sendstate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// A status hook is called in the transaction that records an answer, with
// what it recorded, once: a second record of the answer records nothing
// and calls nothing; an error from the hook leaves nothing recorded, the
// application's writes included; in a transaction of the caller's, the
// hook runs in it.
func TestMarkSentCallsTheStatusHookOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `CREATE TABLE app_emailed (key text PRIMARY KEY, invoice text, message_id text)`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant) VALUES
		('invoice:inv_1', 'email', '{"from":"b@example.com","to":["c@example.com"],"subject":"s","text":"t","tags":{"invoice":"inv_1"}}', 'acme'),
		('invoice:inv_2', 'email', $1, NULL)`, outboxtest.InvoiceBody)
	claimDue(t, pool, 2, claimOpts)

	var calls [][]outbox.Status
	fail := errors.New("the application's table is locked")
	var failing bool
	hook := func(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
		calls = append(calls, statuses)
		for _, s := range statuses {
			if _, err := tx.Exec(ctx, `INSERT INTO app_emailed VALUES ($1, $2, $3)`, s.Key, s.Tags["invoice"], s.MessageID); err != nil {
				return err
			}
		}
		if failing {
			return fail
		}
		return nil
	}
	hctx := sendstate.WithStatusHook(ctx, hook)
	sent := []sendstate.Sent{{Key: "invoice:inv_1", MessageID: "msg_1"}, {Key: "invoice:inv_2", MessageID: "msg_2"}}

	failing = true
	if _, _, err := sendstate.MarkSentMany(hctx, pool, sent); !errors.Is(err, fail) {
		t.Fatalf("MarkSentMany with a failing hook: %v, want its error", err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sending'`); n != 2 {
		t.Fatalf("after the hook failed, %d intents sending, want both: the record rolled back", n)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM app_emailed`); n != 0 {
		t.Fatalf("after the hook failed, %d rows of the application's, want none", n)
	}

	failing = false
	calls = nil
	if _, _, err := sendstate.MarkSentMany(hctx, pool, sent); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || len(calls[0]) != 2 {
		t.Fatalf("hook calls %+v, want one with both answers", calls)
	}
	got := calls[0]
	slices.SortFunc(got, func(a, b outbox.Status) int { return strings.Compare(a.Key, b.Key) })
	want := outbox.Status{Transition: outbox.TransitionSent, Key: "invoice:inv_1", Kind: string(outbox.KindEmail), Tenant: "acme",
		Tags: map[string]string{"invoice": "inv_1"}, MessageID: "msg_1"}
	if g := got[0]; g.Transition != want.Transition || g.Key != want.Key || g.Kind != want.Kind || g.Tenant != want.Tenant ||
		g.MessageID != want.MessageID || g.Tags["invoice"] != "inv_1" || len(g.Tags) != 1 || g.RunKey != "" {
		t.Errorf("status %+v, want %+v", g, want)
	}
	if g := got[1]; g.Key != "invoice:inv_2" || g.Tenant != "" || g.Tags != nil || g.MessageID != "msg_2" {
		t.Errorf("status %+v, want invoice:inv_2 of the default tenant, without tags, msg_2", g)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM app_emailed WHERE message_id IS NOT NULL`); n != 2 {
		t.Fatalf("%d rows of the application's, want 2", n)
	}

	calls = nil
	if _, _, err := sendstate.MarkSentMany(hctx, pool, sent); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Fatalf("a second record of the answers called the hook: %+v", calls)
	}

	// In the caller's transaction the hook runs in it, and the caller's
	// rollback takes the application's writes with the record.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:inv_3', 'email', $1)`, outboxtest.InvoiceBody)
	claimDue(t, pool, 1, claimOpts)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls = nil
	if _, _, err := sendstate.MarkSentMany(hctx, tx, []sendstate.Sent{{Key: "invoice:inv_3", MessageID: "msg_3"}}); err != nil || len(calls) != 1 {
		t.Fatalf("MarkSentMany in a transaction: %v, %d calls", err, len(calls))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM app_emailed WHERE key = 'invoice:inv_3'`); n != 0 {
		t.Fatalf("the caller rolled back, but the hook's row stayed")
	}
	if rec := get(t, pool, "invoice:inv_3"); rec.State != outbox.StateSending {
		t.Fatalf("the caller rolled back, but the intent is %s", rec.State)
	}
}

// The SQL interface: once the application has defined
// sendonce_on_status(sendonce_status) and enabled it, every statement that
// records a transition calls it in its transaction, whoever makes it (a
// worker's mark, an operator's cancel), once for each transition; an error
// it raises rolls the statement back; disabled, it is called no more.
func TestSQLStatusHook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, _ := setup(t)
	if _, err := pool.Exec(ctx, `SELECT sendonce_status_hook_enable()`); err == nil || !strings.Contains(err.Error(), "define the function sendonce_on_status") {
		t.Fatalf("enable without the function: %v, want a refusal naming it", err)
	}
	pgtest.Exec(t, pool, `CREATE TABLE app_status (key text, transition text, tenant text, invoice text, UNIQUE (key, transition))`)
	pgtest.Exec(t, pool, `CREATE FUNCTION sendonce_on_status(s sendonce_status) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
			IF s.idempotency_key = 'invoice:refused' THEN
				RAISE EXCEPTION 'the books are closed';
			END IF;
			INSERT INTO app_status VALUES (s.idempotency_key, s.transition, s.tenant, s.tags ->> 'invoice');
		END $$`)
	pgtest.Exec(t, pool, `SELECT sendonce_status_hook_enable()`)
	pgtest.Exec(t, pool, `SELECT sendonce_status_hook_enable()`) // twice is once
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant) VALUES
		('invoice:1', 'email', '{"from":"b@example.com","to":["c@example.com"],"subject":"s","text":"t","tags":{"invoice":"inv_1"}}', 'acme'),
		('invoice:2', 'email', $1, NULL), ('invoice:3', 'email', $1, NULL), ('invoice:refused', 'email', $1, NULL)`, outboxtest.InvoiceBody)
	claimDue(t, pool, 4, claimOpts)
	sent := []sendstate.Sent{{Key: "invoice:1", MessageID: "m1"}, {Key: "invoice:2", MessageID: "m2"}}
	for range 2 { // the second records nothing
		if _, _, err := sendstate.MarkSentMany(ctx, pool, sent); err != nil {
			t.Fatal(err)
		}
	}
	if err := sendstate.MarkFailed(ctx, pool, sendstate.Outcome{Key: "invoice:3", Reason: "422 validation_error"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sendstate.MarkSentMany(ctx, pool, []sendstate.Sent{{Key: "invoice:refused", MessageID: "m4"}}); err == nil ||
		!strings.Contains(err.Error(), "the books are closed") {
		t.Fatalf("a mark the function refuses: %v, want its error", err)
	}
	if rec := get(t, pool, "invoice:refused"); rec.State != outbox.StateSending {
		t.Fatalf("the function refused the mark, but the intent is %s", rec.State)
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:5', 'email', $1)`, outboxtest.InvoiceBody)
	if _, err := ob.Cancel(ctx, "invoice:5"); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT key || ':' || transition || ':' || tenant || ':' || coalesce(invoice, '') FROM app_status ORDER BY key, transition`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"invoice:1:sent:acme:inv_1", "invoice:2:sent::", "invoice:3:failed::", "invoice:5:canceled::"}
	if !slices.Equal(got, want) {
		t.Fatalf("the application's table: %v, want %v", got, want)
	}

	pgtest.Exec(t, pool, `SELECT sendonce_status_hook_disable()`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:6', 'email', $1)`, outboxtest.InvoiceBody)
	if _, err := ob.Cancel(ctx, "invoice:6"); err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM app_status`); n != 4 {
		t.Fatalf("disabled, the function was still called: %d rows, want 4", n)
	}
}

// A status hook adds no transaction: its writes are in the mark's own
// (the rows' xmin is one transaction id), a lone mark's as well as one in
// a transaction of the caller's.
func TestStatusHookAddsNoTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `CREATE TABLE app_emailed (key text PRIMARY KEY)`)
	for i := range 4 {
		pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:' || $1::int, 'email', $2)`, i, outboxtest.InvoiceBody)
	}
	claimDue(t, pool, 4, claimOpts)
	hook := func(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
		keys := make([]string, len(statuses))
		for i, s := range statuses {
			keys[i] = s.Key
		}
		_, err := tx.Exec(ctx, `INSERT INTO app_emailed SELECT unnest($1::text[])`, keys)
		return err
	}
	hctx := sendstate.WithStatusHook(ctx, hook)
	if _, _, err := sendstate.MarkSentManyAsyncCommit(hctx, pool, []sendstate.Sent{{Key: "invoice:0", MessageID: "m0"}, {Key: "invoice:1", MessageID: "m1"}}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, _, err := sendstate.MarkSentMany(hctx, tx, []sendstate.Sent{{Key: "invoice:2", MessageID: "m2"}, {Key: "invoice:3", MessageID: "m3"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Each pair of marks and its hook's rows: one transaction id.
	if n := outboxtest.Value[int](t, pool, `SELECT count(DISTINCT x) FROM (
		SELECT xmin::text AS x FROM sendonce_outbox WHERE state = 'sent'
		UNION ALL SELECT xmin::text FROM app_emailed) t`); n != 2 {
		t.Fatalf("the marks and the hook's writes are in %d transactions, want 2 (one per mark)", n)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM app_emailed a JOIN sendonce_outbox o ON o.idempotency_key = a.key AND o.xmin::text = a.xmin::text`); n != 4 {
		t.Fatalf("%d of the hook's 4 rows share their intent's transaction", n)
	}
}
