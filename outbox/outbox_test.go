package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const invoiceBody = outboxtest.InvoiceBody

func setup(t *testing.T) (*pgxpool.Pool, *outbox.Outbox) {
	t.Helper()
	return outboxtest.New(t)
}

func enqueue(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, in outbox.Intent) (*outbox.EnqueueResult, error) {
	t.Helper()
	var res *outbox.EnqueueResult
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		res, err = ob.Enqueue(context.Background(), tx, in)
		return err
	})
	return res, err
}

// riverJobs counts River's jobs, of any kind and state: an enqueued intent
// is its row alone, with no River job (issue 44).
func riverJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return outboxtest.Value[int](t, pool, `SELECT count(*) FROM river_job`)
}

// countRows counts the outbox's rows.
func countRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox`)
}

// drainClaims is what the workers' drain of queue ("" is the default)
// would claim now, in its order (sendstate.ClaimDue, the drain's own
// statement), without claiming it: the claim runs in a transaction that is
// rolled back.
func drainClaims(t *testing.T, pool *pgxpool.Pool, queue string) []*sendstate.DrainClaim {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claims, err := sendstate.ClaimDue(ctx, tx, 10000, sendstate.ClaimOptions{Queue: queue, ReplayWindow: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

// drainKeys is the keys of what the drain of queue would claim now, in its
// order (see drainClaims).
func drainKeys(t *testing.T, pool *pgxpool.Pool, queue string) []string {
	t.Helper()
	var keys []string
	for _, c := range drainClaims(t, pool, queue) {
		keys = append(keys, c.Record.Key)
	}
	return keys
}

func TestEnqueueCommitsWithTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)

	// A rolled-back transaction leaves no intent (and no River job).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ob.Enqueue(ctx, tx, outbox.Intent{Key: "invoice:rolled_back", Payload: json.RawMessage(invoiceBody)})
	if rbErr := tx.Rollback(ctx); err != nil || rbErr != nil {
		t.Fatalf("enqueue: %v; rollback: %v", err, rbErr)
	}
	if _, err := ob.Get(ctx, "invoice:rolled_back"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Get after rollback: %v, want ErrNotFound", err)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs after rollback, want 0", n)
	}

	res, err := enqueue(t, pool, ob, outbox.Intent{Key: "invoice:inv_4192", Payload: json.RawMessage(invoiceBody)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Existing || res.Record.State != outbox.StatePending || res.Record.Kind != outbox.KindEmail || res.Record.JobID != nil {
		t.Fatalf("enqueued %+v, want pending, with no River job", res.Record)
	}
	// The committed row is all there is of it, and the drain of the
	// Outbox's queue claims it.
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs after the commit, want 0", n)
	}
	if got := drainKeys(t, pool, outbox.DefaultQueue); !slices.Equal(got, []string{"invoice:inv_4192"}) {
		t.Fatalf("the drain of %s would claim %v, want the intent", outbox.DefaultQueue, got)
	}
}

func TestEnqueueSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	first, err := enqueue(t, pool, ob, outbox.Intent{Key: "invoice:1", Payload: json.RawMessage(invoiceBody)})
	if err != nil {
		t.Fatal(err)
	}

	// The same payload, spelled differently as JSON, is the same intent.
	respelled := `{ "text":"Attached.", "subject":"Invoice inv_4192", "to":["ada@example.com"], "from":"billing@example.com" }`
	again, err := enqueue(t, pool, ob, outbox.Intent{Key: "invoice:1", Payload: json.RawMessage(respelled)})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Existing || again.Record.ID != first.Record.ID {
		t.Fatalf("second enqueue: existing=%v id=%d, want the first intent %d", again.Existing, again.Record.ID, first.Record.ID)
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 1 || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs, want 1 and none", rows, jobs)
	}

	// A different payload under the same key is refused, and the caller's
	// transaction stays usable.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "invoice:1", Payload: json.RawMessage(strings.Replace(invoiceBody, "ada@", "bob@", 1))})
		if !errors.Is(err, outbox.ErrKeyReuse) {
			t.Errorf("reuse: %v, want ErrKeyReuse", err)
		}
		_, err = ob.Enqueue(ctx, tx, outbox.Intent{Key: "invoice:2", Payload: json.RawMessage(invoiceBody)})
		return err
	})
	if err != nil {
		t.Fatalf("transaction after a refused enqueue: %v", err)
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 2 || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs, want 2 and none", rows, jobs)
	}
}

// TestEnqueueRefusesEmptyKey: an intent without a key is refused, in
// Enqueue and EnqueueMany alike, with an *InvalidError that gives the
// seeds' rule and names RandomKey, and nothing is written (the key used to
// be generated in silence); a random key is there only when asked for by
// name, and is stored, so Get finds it. A key holding a clock reading is
// refused the same way.
func TestEnqueueRefusesEmptyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for name, intents := range map[string][]outbox.Intent{
		"Enqueue":     {{Payload: json.RawMessage(invoiceBody)}},
		"EnqueueMany": {{Key: "invoice:ok", Payload: json.RawMessage(invoiceBody)}, {Payload: json.RawMessage(invoiceBody)}},
		"a clock":     {{Key: "invoice:" + time.Now().UTC().Format(time.RFC3339Nano), Payload: json.RawMessage(invoiceBody)}},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if name == "EnqueueMany" {
				_, err := ob.EnqueueMany(ctx, tx, intents)
				return err
			}
			_, err := ob.Enqueue(ctx, tx, intents[0])
			return err
		})
		var inv *outbox.InvalidError
		if !errors.As(err, &inv) || inv.Field != "key" || !strings.Contains(err.Error(), "never from a clock") {
			t.Errorf("%s: %v, want an *InvalidError for the key giving the rule", name, err)
		}
		if name != "a clock" && !strings.Contains(fmt.Sprint(err), "outbox.RandomKey()") {
			t.Errorf("%s: %q, want RandomKey named", name, err)
		}
		if name == "EnqueueMany" && inv != nil && inv.Index != 1 {
			t.Errorf("EnqueueMany: index %d, want 1", inv.Index)
		}
	}
	if n := countRows(t, pool); n != 0 {
		t.Fatalf("refused intents left %d rows", n)
	}

	key := outbox.RandomKey()
	if !regexp.MustCompile(`^oe-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(key) || key == outbox.RandomKey() {
		t.Fatalf("RandomKey() = %q, want oe-<uuid>, another each call", key)
	}
	res, err := enqueue(t, pool, ob, outbox.Intent{Key: key, Payload: json.RawMessage(invoiceBody)})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ob.Get(ctx, key)
	if err != nil || stored.ID != res.Record.ID {
		t.Fatalf("Get(random key) = %v, %v", stored, err)
	}
}

func TestEnqueueRacingSameKey(t *testing.T) {
	t.Parallel()
	pool, ob := setup(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := enqueue(t, pool, ob, outbox.Intent{Key: "race:1", Payload: json.RawMessage(invoiceBody)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 1 || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs after %d racing enqueues, want 1 and none", rows, jobs, n)
	}
}

func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "k:0", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	var intents []outbox.Intent
	for i := range 500 {
		intents = append(intents, outbox.Intent{Key: fmt.Sprintf("k:%d", i), Payload: json.RawMessage(invoiceBody)})
	}
	intents = append(intents, intents[7]) // the same intent twice in one call
	var res []*outbox.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = ob.EnqueueMany(ctx, tx, intents)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 501 || !res[0].Existing || res[1].Existing || !res[500].Existing || res[500].Record.ID != res[7].Record.ID {
		t.Fatalf("results: len %d, [0].Existing=%v [1].Existing=%v [500].Existing=%v", len(res), res[0].Existing, res[1].Existing, res[500].Existing)
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 500 || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs, want 500 and none", rows, jobs)
	}

	// A reused key with another payload refuses the whole call, and takes
	// back what the call had inserted.
	reuse := []outbox.Intent{
		{Key: "k:fresh", Payload: json.RawMessage(invoiceBody)},
		{Key: "k:3", Payload: json.RawMessage(strings.Replace(invoiceBody, "ada@", "eve@", 1))},
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, reuse)
		if !errors.Is(err, outbox.ErrKeyReuse) || !strings.Contains(err.Error(), "intent 1") {
			t.Errorf("reuse in a batch: %v", err)
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = 'k:fresh'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("k:fresh stayed written (%d rows, %v)", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 500 || jobs != 0 {
		t.Fatalf("%d rows and %d River jobs after a refused batch, want 500 and none", rows, jobs)
	}

	// One bad intent refuses the whole call, naming its index.
	bad := append([]outbox.Intent{}, intents[:3]...)
	bad = append(bad, outbox.Intent{Key: "k:new", Payload: json.RawMessage(`{"from":"a@example.com","text":"x"}`)})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.EnqueueMany(ctx, tx, bad); return err })
	if err == nil || !strings.Contains(err.Error(), "intent 3") || !strings.Contains(err.Error(), "payload.to") {
		t.Fatalf("bad batch: %v", err)
	}
}

func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 256)
	cases := []struct {
		name  string
		in    outbox.Intent
		field string
	}{
		{"key with space", outbox.Intent{Key: "invoice 1", Payload: json.RawMessage(invoiceBody)}, "key"},
		{"key too long", outbox.Intent{Key: long, Payload: json.RawMessage(invoiceBody)}, "key"},
		{"key with slash", outbox.Intent{Key: "a/b", Payload: json.RawMessage(invoiceBody)}, "key"},
		{"unknown kind", outbox.Intent{Key: "k", Kind: "sms", Payload: json.RawMessage(invoiceBody)}, "kind"},
		{"malformed json", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":`)}, "payload"},
		{"array payload", outbox.Intent{Key: "k", Payload: json.RawMessage(`[1]`)}, "payload"},
		{"string payload", outbox.Intent{Key: "k", Payload: json.RawMessage(`"hello"`)}, "payload"},
		{"no from", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"to":["a@x.io"],"text":"x"}`)}, "payload.from"},
		{"no to", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","text":"x"}`)}, "payload.to"},
		{"empty to", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","to":[],"text":"x"}`)}, "payload.to"},
		{"numeric to", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","to":5,"text":"x"}`)}, "payload.to"},
		{"no content", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","to":"b@x.io"}`)}, "payload.html"},
		{"template without id", outbox.Intent{Key: "k", Kind: outbox.KindTemplate, Payload: json.RawMessage(`{"from":"a@x.io","to":"b@x.io"}`)}, "template_id"},
		{"template id on email", outbox.Intent{Key: "k", TemplateID: "t", Payload: json.RawMessage(invoiceBody)}, "template_id"},
		{"empty batch", outbox.Intent{Key: "k", Kind: outbox.KindBatch, Payload: json.RawMessage(`{"emails":[]}`)}, "payload.emails"},
		{"bad batch item", outbox.Intent{Key: "k", Kind: outbox.KindBatch, Payload: json.RawMessage(`{"emails":[` + invoiceBody + `,{"from":"a@x.io"}]}`)}, "payload.emails[1].to"},
		{"broadcast without audience", outbox.Intent{Key: "k", Kind: outbox.KindBroadcast, Payload: json.RawMessage(`{"from":"a@x.io","subject":"s","text":"x"}`)}, "payload.audienceId"},
		{"broadcast without subject", outbox.Intent{Key: "k", Kind: outbox.KindBroadcast, Payload: json.RawMessage(`{"from":"a@x.io","text":"x","audienceId":"a"}`)}, "payload.subject"},
		{"broadcast without content", outbox.Intent{Key: "k", Kind: outbox.KindBroadcast, Payload: json.RawMessage(`{"from":"a@x.io","subject":"s","audienceId":"a"}`)}, "payload.html"},
		{"unparseable scheduledAt", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","to":"b@x.io","text":"x","scheduledAt":"tomorrow"}`)}, "payload.scheduledAt"},
		{"oversized", outbox.Intent{Key: "k", Payload: json.RawMessage(`{"from":"a@x.io","to":"b@x.io","text":"` + strings.Repeat("x", outbox.MaxPayloadBytes) + `"}`)}, "payload"},
	}
	pool, ob := setup(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := enqueue(t, pool, ob, tc.in)
			var inv *outbox.InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.field {
				t.Fatalf("error %v, want an InvalidError about %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || strings.Contains(err.Error(), "Go value") {
				t.Fatalf("message %q does not name %s", err, tc.field)
			}
		})
	}
	if rows, jobs := countRows(t, pool), riverJobs(t, pool); rows != 0 || jobs != 0 {
		t.Fatalf("bad input wrote %d rows and %d River jobs", rows, jobs)
	}
}

func TestPlainSQLInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)

	bad := []struct{ sql, want string }{
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('bad key', '` + invoiceBody + `')`, "invalid idempotency_key"},
		{`INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('k', 'fax', '` + invoiceBody + `')`, `unknown kind 'fax'`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '"just a string"')`, "payload must be a JSON object"},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":"a@x.io","text":"x"}')`, `recipient in "to"`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"to":"b@x.io","text":"x"}')`, `needs "from"`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":"a@x.io","to":"b@x.io"}')`, "needs content"},
		{`INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('k', 'template', '{"from":"a@x.io","to":"b@x.io"}')`, "needs template_id"},
		{`INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('k', 'batch', '{"emails":[{"from":"a@x.io","to":"b@x.io"}]}')`, `"emails[0].html"`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":"a@x.io","to":[""],"text":"x"}')`, `"to" must hold only non-empty`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', jsonb_build_object('from','a@x.io','to','b@x.io','text', repeat('x', 1048577)))`, "over the 1 MiB limit"},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":')`, "invalid input syntax for type json"},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":"a@x.io","to":"b@x.io","text":"x","scheduledAt":"tomorrow"}')`, `"scheduledAt" tomorrow is not an RFC 3339 time`},
		{`INSERT INTO sendonce_outbox (idempotency_key, payload) VALUES ('k', '{"from":"a@x.io","to":"b@x.io","text":"x","scheduledAt":"2026-13-45T10:00:00Z"}')`, "is not an RFC 3339 time"},
		{`INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('k', 'broadcast', '{"from":"a@x.io","text":"x","audienceId":"a"}')`, `needs "subject"`},
	}
	for _, b := range bad {
		_, err := pool.Exec(ctx, b.sql)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s\n  error %v, want it to say %q", b.sql, err, b.want)
		}
	}

	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload)
		VALUES ('php:order:77', 'email', $1)`, strings.Replace(invoiceBody, "{", `{"scheduledAt":"2030-01-02T03:04:05.678+01:00",`, 1)); err != nil {
		t.Fatal(err)
	}
	// A valid row is pending with no River job, for the workers' drains.
	rec, err := ob.Get(ctx, "php:order:77")
	if err != nil || rec.JobID != nil || rec.State != outbox.StatePending {
		t.Fatalf("plain-SQL intent %+v, %v: want pending without a job", rec, err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "c:1", Payload: json.RawMessage(invoiceBody), SendAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rec, err := ob.Cancel(ctx, "c:1")
	if err != nil || rec.State != outbox.StateCanceled {
		t.Fatalf("Cancel = %+v, %v", rec, err)
	}
	// Its send time comes (as the hour passing would leave it): the drain
	// claims nothing of it.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET send_at = now() - interval '1 second' WHERE idempotency_key = 'c:1'`)
	if got := drainKeys(t, pool, ""); len(got) != 0 {
		t.Fatalf("the drain would claim %v after the cancel, want nothing", got)
	}

	// Once an attempt has been made the send may have reached the API.
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "c:2", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	attempted(t, pool, ob, "c:2", outbox.StateSending, false)
	_, err = ob.Cancel(ctx, "c:2")
	var se *outbox.StateError
	if !errors.As(err, &se) || se.State != outbox.StateSending {
		t.Fatalf("Cancel while sending = %v, want a StateError", err)
	}
	if _, err := ob.Cancel(ctx, "c:missing"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Cancel of a missing key = %v", err)
	}
}

// TestCancelRetrying: an intent retrying after attempts none of which may
// have reached the API (each refused before the request left: no
// connection, no DNS) can be canceled; one whose attempt may have reached
// it (uncertain) cannot, and the refusal says why.
func TestCancelRetrying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for _, k := range []string{"c:never-connected", "c:uncertain"} {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: k, Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 {
		attempted(t, pool, ob, "c:never-connected", outbox.StatePending, false)
	}
	if rec := outboxtest.Get(t, ob, "c:never-connected"); !rec.Cancelable() {
		t.Errorf("Cancelable() = false for %s, %d attempts, uncertain %v; want true", rec.State, rec.Attempts, rec.Uncertain)
	}
	rec, err := ob.Cancel(ctx, "c:never-connected")
	if err != nil || rec.State != outbox.StateCanceled || rec.Attempts != 7 {
		t.Fatalf("Cancel after 7 attempts that reached nothing = %v; want canceled", err)
	}
	if got := drainKeys(t, pool, ""); len(got) != 1 || got[0] != "c:uncertain" {
		t.Fatalf("the drain would claim %v, want only c:uncertain", got)
	}

	attempted(t, pool, ob, "c:uncertain", outbox.StatePending, false)
	attempted(t, pool, ob, "c:uncertain", outbox.StatePending, true)
	if rec := outboxtest.Get(t, ob, "c:uncertain"); rec.Cancelable() {
		t.Errorf("Cancelable() = true for %s, %d attempts, uncertain %v; want false", rec.State, rec.Attempts, rec.Uncertain)
	}
	_, err = ob.Cancel(ctx, "c:uncertain")
	var se *outbox.StateError
	if !errors.As(err, &se) || se.State != outbox.StatePending || !strings.Contains(se.Reason, "2 send attempt(s) already made, and one may have reached the API") {
		t.Fatalf("Cancel of an uncertain intent = %v, want a StateError saying an attempt may have reached the API", err)
	}
	if rec := outboxtest.Get(t, ob, "c:uncertain"); rec.State != outbox.StatePending {
		t.Fatalf("after the refused cancel: %s, want pending", rec.State)
	}

	// Parked uncertain, then retried with force: the force clears
	// uncertain (a new window), but the attempt before it may still have
	// reached the API.
	attempted(t, pool, ob, "c:uncertain", outbox.StateFailed, true)
	if _, err := ob.Retry(ctx, "c:uncertain", &outbox.RetryOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if rec := outboxtest.Get(t, ob, "c:uncertain"); rec.State != outbox.StatePending || rec.Uncertain || rec.Cancelable() {
		t.Fatalf("after a forced retry: %s, uncertain %v, cancelable %v; want pending, not uncertain, not cancelable",
			rec.State, rec.Uncertain, rec.Cancelable())
	}
	_, err = ob.Cancel(ctx, "c:uncertain")
	if !errors.As(err, &se) || !strings.Contains(se.Reason, "3 send attempt(s) already made, and one before its forced retry at") {
		t.Fatalf("Cancel after a forced retry = %v, want a StateError naming the forced retry", err)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "r:1", Payload: json.RawMessage(invoiceBody)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Retry(ctx, "r:1", nil); err == nil {
		t.Fatal("Retry of a pending intent succeeded")
	}
	c := attempted(t, pool, ob, "r:1", outbox.StateFailed, false)
	// As the drain leaves an intent that failed after its tries, 429s and
	// a next attempt still set.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET tries = 5, rate_limited = 2, next_attempt_at = now() + interval '1 hour'
		WHERE idempotency_key = 'r:1'`)
	l := listen(t, pool)
	rec, err := ob.Retry(ctx, "r:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The window still runs from the first attempt.
	if rec.State != outbox.StatePending || rec.Attempts != 1 || rec.FirstAttemptAt == nil ||
		!rec.FirstAttemptAt.Equal(*c.FirstAttemptAt) || rec.Key != "r:1" ||
		rec.JobID != nil || rec.ForcedRetryAt != nil {
		t.Fatalf("retried intent %+v", rec)
	}
	// Back on the drain, with no River job: due now, woken at the commit,
	// and claimed as a new intent's first try, with no 429s behind it.
	l.await(t)
	claims := drainClaims(t, pool, "")
	if len(claims) != 1 || claims[0].Record.Key != "r:1" || claims[0].Tries != 1 || claims[0].RateLimited != 0 {
		t.Fatalf("the drain would claim %d intents after the retry (first %+v), want r:1 at try 1 with no 429s", len(claims), claims)
	}
	if n := riverJobs(t, pool); n != 0 {
		t.Fatalf("%d River jobs after the retry, want 0", n)
	}
}

func TestListAndStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for i := range 5 {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: fmt.Sprintf("l:%d", i), Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Fatal(err)
		}
	}
	l0 := attempted(t, pool, ob, "l:0", outbox.StateSent, false)
	sent, err := ob.List(ctx, &outbox.ListParams{State: outbox.StateSent})
	if err != nil || len(sent) != 1 || sent[0].MessageID != l0.MessageID {
		t.Fatalf("List(sent) = %v, %v", sent, err)
	}
	page, err := ob.List(ctx, &outbox.ListParams{Limit: 2, AfterID: sent[0].ID})
	if err != nil || len(page) != 2 || page[0].Key != "l:1" {
		t.Fatalf("List page = %v, %v", page, err)
	}
	if _, err := ob.List(ctx, &outbox.ListParams{State: "lost"}); err == nil {
		t.Fatal("List of an unknown state succeeded")
	}
	st, err := ob.Stats(ctx)
	if err != nil || st.Counts[outbox.StateSent] != 1 || st.Counts[outbox.StatePending] != 4 || st.Counts[outbox.StateFailed] != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if st.OldestPending <= 0 {
		t.Fatalf("oldest pending age %v, want > 0", st.OldestPending)
	}
}

// attempted moves an intent as the worker would after an attempt: to
// state, one more attempt, the first attempt's time stamped.
func attempted(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, key string, state outbox.State, uncertain bool) *outbox.Record {
	t.Helper()
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = $2, attempts = attempts + 1,
		first_attempt_at = coalesce(first_attempt_at, now()), uncertain = uncertain OR $3,
		message_id = CASE WHEN $2 = 'sent' THEN 'msg_' || id END WHERE idempotency_key = $1`, key, state, uncertain)
	return outboxtest.Get(t, ob, key)
}

// listener is a connection listening on sendonce_outbox, the channel the
// workers' drains are woken on (sendstate.NotifyChannel).
type listener struct {
	conn *pgx.Conn
	pool *pgxpool.Pool
}

// listen listens on sendonce_outbox from now on.
func listen(t *testing.T, pool *pgxpool.Pool) *listener {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.Hijack()
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `LISTEN sendonce_outbox`); err != nil {
		t.Fatal(err)
	}
	return &listener{conn: conn, pool: pool}
}

// next returns the payload of the next notification, failing the test
// when none comes within 10 s.
func (l *listener) next(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification on sendonce_outbox: %v", err)
	}
	return n.Payload
}

// await waits for the drains' wake-up (empty payload, as the producers
// send it).
func (l *listener) await(t *testing.T) {
	t.Helper()
	if p := l.next(t); p != "" {
		t.Fatalf("notification %q on sendonce_outbox, want the drains' wake-up", p)
	}
}

// none checks that nothing was notified since the last notification read:
// another session notifies a marker, and the next notification must be
// it, since PostgreSQL delivers the notifications of transactions in the
// order they committed.
func (l *listener) none(t *testing.T, what string) {
	t.Helper()
	pgtest.Exec(t, l.pool, `SELECT pg_notify('sendonce_outbox', 'marker')`)
	if p := l.next(t); p != "marker" {
		t.Fatalf("%s woke the drains (notification %q before the marker)", what, p)
	}
}
