package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// insertSQL inserts an email intent as a producer in another language does:
// plain SQL, no River job of its own.
func insertSQL(t *testing.T, pool *pgxpool.Pool, key, to string) {
	t.Helper()
	body := fmt.Sprintf(`{"from":"billing@example.com","to":[%q],"subject":"Invoice","text":"x"}`, to)
	if _, err := pool.Exec(context.Background(), `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ($1, 'email', $2)`, key, body); err != nil {
		t.Fatal(err)
	}
}

// faultyAPI is a fake API with the fault rules applied from its start, and
// a client of it that makes no retries of its own, so that every answer
// reaches the worker's verdict.
func faultyAPI(t *testing.T, rules ...string) (*fakeapi.Server, *client.Client) {
	t.Helper()
	var faults []fakeapi.Fault
	for _, rule := range rules {
		f, err := fakeapi.ParseFault(rule)
		if err != nil {
			t.Fatal(err)
		}
		faults = append(faults, f)
	}
	fake := fakeapi.NewTest(t, fakeapi.Config{Faults: faults})
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(fake.URL()), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	return fake, c
}

// results counts the outcomes a worker observes, and lets a test await a
// count: the event a worker's record of an outcome ends with.
type results struct {
	mu      sync.Mutex
	n       map[worker.Result]int
	changed chan struct{}
}

func newResults() *results {
	return &results{n: map[worker.Result]int{}, changed: make(chan struct{})}
}

func (r *results) Observe(o worker.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[o.Result]++
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait returns once n outcomes of result have been observed.
func (r *results) wait(t *testing.T, ctx context.Context, result worker.Result, n int) {
	t.Helper()
	for {
		r.mu.Lock()
		got, ch := r.n[result], r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %d outcomes %q: %d", n, result, got)
		}
	}
}

// Intents inserted without a River job are drained: claimed in batches and
// sent, each once, and no River job is made for any of them.
func TestDrainSendsIntentsWithoutJobs(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	const n = 120
	for i := range n {
		insertSQL(t, pool, fmt.Sprintf("php:order:%d", i), fmt.Sprintf("c%d@example.com", i))
	}
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 20, Send: worker.SendConfig{Observer: seen}})
	for i := range 5 { // rows inserted while it runs, announced by the trigger
		insertSQL(t, pool, fmt.Sprintf("php:late:%d", i), fmt.Sprintf("late%d@example.com", i))
	}
	if err := fake.WaitDeliveries(ctx, n+5); err != nil {
		t.Fatalf("waiting for %d deliveries: %v (have %d)", n+5, err, len(fake.Deliveries()))
	}
	perKey := map[string]int{}
	for _, d := range fake.Deliveries() {
		perKey[d.IdempotencyKey]++
	}
	for k, c := range perKey {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
	seen.wait(t, ctx, worker.ResultSent, n+5)
	if sent := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent' AND job_id IS NULL AND attempts = 1`); sent != n+5 {
		t.Fatalf("%d rows sent at their first attempt with no job, want %d", sent, n+5)
	}
	if jobs := outboxtest.Value[int](t, pool, `SELECT count(*) FROM river_job WHERE kind = 'sendonce_send'`); jobs != 0 {
		t.Fatalf("%d River jobs made for drained intents, want none", jobs)
	}
}

// A drain claims the intents of its own queue only, as a River client works
// its queue's jobs: rows a producer puts on queue "billing" are sent by the
// billing worker's client, those left on the default queue by the default
// worker's; and a queue name River would refuse is refused at the insert.
func TestDrainClaimsItsOwnQueue(t *testing.T) {
	t.Parallel()
	ctx, pool, _, _, _ := e2eSetup(t)
	billingAPI, billing := faultyAPI(t)
	defaultAPI, other := faultyAPI(t)
	const n = 20
	for i := range n {
		body := fmt.Sprintf(`{"from":"billing@example.com","to":["b%d@example.com"],"subject":"Invoice","text":"x"}`, i)
		if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, queue) VALUES ($1, 'email', $2, 'billing')`,
			fmt.Sprintf("billing:%d", i), body); err != nil {
			t.Fatal(err)
		}
		insertSQL(t, pool, fmt.Sprintf("default:%d", i), fmt.Sprintf("d%d@example.com", i))
	}
	start(t, pool, &worker.Config{Client: billing, Queue: "billing", Concurrency: 5})
	start(t, pool, &worker.Config{Client: other, Concurrency: 5})
	for api, prefix := range map[*fakeapi.Server]string{billingAPI: "billing:", defaultAPI: "default:"} {
		if err := api.WaitDeliveries(ctx, n); err != nil {
			t.Fatalf("waiting for %d deliveries of %s: %v", n, prefix, err)
		}
		for _, d := range api.Deliveries() {
			if !strings.HasPrefix(d.IdempotencyKey, prefix) {
				t.Errorf("the %s queue's worker sent %s", prefix, d.IdempotencyKey)
			}
		}
	}
	_, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, queue) VALUES ('bad:1', 'email', $1, 'Billing Queue')`,
		`{"from":"billing@example.com","to":["x@example.com"],"subject":"Invoice","text":"x"}`)
	if err == nil || !strings.Contains(err.Error(), "sendonce_outbox_queue_check") {
		t.Fatalf("insert on queue %q: %v, want the queue's check refusing it", "Billing Queue", err)
	}
}

// A drained intent the API refuses for a while is retried from its row,
// after the contract's backoff, until it is sent, with no River job.
func TestDrainRetriesFromTheRow(t *testing.T) {
	t.Parallel()
	ctx, pool, _, _, _ := e2eSetup(t)
	fake, c := faultyAPI(t, "error_before=503:times=2:to=flaky@")
	insertSQL(t, pool, "php:flaky", "flaky@example.com")
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 4, Send: worker.SendConfig{RetryBase: 100 * time.Millisecond, Observer: seen}})
	seen.wait(t, ctx, worker.ResultSent, 1)
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent' AND attempts = 3 AND job_id IS NULL`); n != 1 {
		t.Fatalf("want the intent sent at its third attempt, with no job: %d such rows", n)
	}
	if got := len(fake.Deliveries()); got != 1 {
		t.Fatalf("%d deliveries, want 1", got)
	}
}

// Issue 44: a token of the fleet's budget taken for a send that makes no
// request (its recipients are suppressed) goes back to the budget. With a
// quota of 3 a day, three intents to suppressed addresses leave the quota
// to the deliverable one, which goes at once rather than after the
// quota's probe a minute later: by a River job (intents enqueued from Go),
// and by the drain (intents inserted by SQL). One send at a time, as the
// issue found it.
func TestTokensOfSendsWithoutARequestComeBack(t *testing.T) {
	t.Parallel()
	for _, viaSQL := range []bool{false, true} {
		t.Run(map[bool]string{false: "job", true: "drain"}[viaSQL], func(t *testing.T) {
			t.Parallel()
			tokensComeBack(t, viaSQL)
		})
	}
}

func tokensComeBack(t *testing.T, viaSQL bool) {
	ctx, pool, ob, fake, c := e2eSetup(t)
	if _, err := ob.Suppress(ctx, []string{"gone1@example.com", "gone2@example.com", "gone3@example.com"}, "test"); err != nil {
		t.Fatal(err)
	}
	limits, err := worker.ParseRateLimits("3/d")
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(key, to string) {
		if viaSQL {
			insertSQL(t, pool, key, to)
			return
		}
		body := json.RawMessage(fmt.Sprintf(`{"from":"billing@example.com","to":[%q],"subject":"Invoice","text":"x"}`, to))
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: body})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		enqueue(fmt.Sprintf("gone:%d", i), fmt.Sprintf("gone%d@example.com", i+1))
	}
	seen := newResults()
	start(t, pool, &worker.Config{Client: c, Concurrency: 1, RateLimits: limits, Send: worker.SendConfig{Observer: seen}})
	seen.wait(t, ctx, worker.ResultSuppressed, 3)
	began := time.Now()
	enqueue("ok", "ok@example.com")
	if err := fake.WaitDeliveries(ctx, 1); err != nil {
		var rows, quota string
		_ = pool.QueryRow(context.Background(), `SELECT string_agg(idempotency_key || ' ' || state || ' attempts=' || attempts, '; ')
			FROM sendonce_outbox`).Scan(&rows)
		_ = pool.QueryRow(context.Background(), `SELECT string_agg(row_to_json(q)::text, '; ') FROM sendonce_rate_quota q`).Scan(&quota)
		t.Fatalf("the deliverable intent: %v; rows: %s; quota: %s", err, rows, quota)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Fatalf("the deliverable intent took %s: the suppressed ones spent the quota", took.Round(time.Second))
	}
	if got := len(fake.Requests()); got != 1 {
		t.Fatalf("%d API requests, want 1 (none for a suppressed intent)", got)
	}
}

// A drained attempt whose outcome could not be recorded (the database
// refused, or was down, between the API's answer and the record) leaves
// no intent sending under a worker that lives on: the drain gives it back
// at once, and its next claim replays it under its key. A River job would
// have run again; a drained intent has no job to.
func TestDrainReleasesAnUnrecordedAttempt(t *testing.T) {
	t.Parallel()
	ctx, pool, _, fake, c := e2eSetup(t)
	insertSQL(t, pool, "php:unrecorded", "unrecorded@example.com")
	seen := newResults()
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 2, SweepInterval: 100 * time.Millisecond,
		Send: worker.SendConfig{Observer: seen}})
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	worker.SetAfterSend(w, func(string) error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("the database went away before the record")
		}
		return nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	seen.wait(t, ctx, worker.ResultReplayed, 1)
	var state string
	var attempts int
	var replayed, uncertain bool
	if err := pool.QueryRow(ctx, `SELECT state, attempts, replayed, uncertain FROM sendonce_outbox WHERE idempotency_key = 'php:unrecorded'`).
		Scan(&state, &attempts, &replayed, &uncertain); err != nil {
		t.Fatal(err)
	}
	if state != "sent" || attempts != 2 || !replayed || !uncertain {
		t.Fatalf("row: %s, %d attempts, replayed %v, uncertain %v; want sent at the second attempt, a replay", state, attempts, replayed, uncertain)
	}
	if got := len(fake.Deliveries()); got != 1 {
		t.Fatalf("%d deliveries, want 1", got)
	}
}

// A claim the database committed whose answer the worker never read (the
// connection was lost with a crash or restart of the database) leaves an
// intent sending under the worker's own claim, which no send of the worker
// takes up and whose lease, still held, keeps the fleet's rescue off it.
// The worker's sweeper gives it back, and it is sent, once, under its key.
func TestDrainReleasesALostClaim(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	seen := newResults()
	w := start(t, pool, &worker.Config{Client: c, Concurrency: 4, SweepInterval: 200 * time.Millisecond, Send: worker.SendConfig{Observer: seen}})
	var epoch int32
	if err := pool.QueryRow(ctx, `SELECT epoch FROM sendonce_worker WHERE river_client_id = $1 AND ended_at IS NULL`,
		w.RiverClient().ID()).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	// The row as the lost claim left it: claimed by this worker, a try
	// and an attempt counted, a minute ago.
	body := `{"from":"billing@example.com","to":["lost@example.com"],"subject":"Invoice","text":"x"}`
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, send_at) VALUES ('php:lost', 'email', $1, now() + interval '1 day')`, body); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sending', claimed_by = $1, tries = 1, attempts = 1, send_at = NULL,
		first_attempt_at = now() - interval '1 minute', updated_at = now() - interval '1 minute' WHERE idempotency_key = 'php:lost'`, epoch); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, ctx, worker.ResultSent, 1)
	rec := outboxtest.Get(t, ob, "php:lost")
	if rec.State != outbox.StateSent || !rec.Uncertain || rec.Attempts != 2 || len(fake.Deliveries()) != 1 || fake.Deliveries()[0].IdempotencyKey != "php:lost" {
		t.Fatalf("after the release: %+v, deliveries %+v; want sent, uncertain, 2 attempts, one delivery under its key", rec, fake.Deliveries())
	}
}

// Concurrency bounds every send of the worker at once: its drain's and its
// River jobs' (here intents with a job of their own, as a database upgraded
// from a release before the drain holds) together, not each of them.
func TestConcurrencyBoundsDrainAndJobsTogether(t *testing.T) {
	t.Parallel()
	ctx, pool, _, _, _ := e2eSetup(t)
	fake, _ := faultyAPI(t, "latency=200ms;method=POST")
	var inFlight, most atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		httputil.NewSingleHostReverseProxy(mustURL(t, fake.URL())).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	c, err := client.New(client.WithAPIKey("oe_test_e2e000000000000"), client.WithBaseURL(proxy.URL), client.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	var withJobs []string
	for i := range 20 {
		insertSQL(t, pool, fmt.Sprintf("php:c:%d", i), fmt.Sprintf("c%d@example.com", i))
		if i%2 == 0 {
			withJobs = append(withJobs, fmt.Sprintf("php:c:%d", i))
		}
	}
	outboxtest.GiveJobs(t, pool, withJobs...)
	const concurrency = 3
	// A rate far above what three sends of 200 ms can make: the budget
	// paces nothing here, Concurrency alone bounds the sends.
	limits, err := worker.ParseRateLimits("1000/s")
	if err != nil {
		t.Fatal(err)
	}
	start(t, pool, &worker.Config{Client: c, Concurrency: concurrency, RateLimits: limits})
	if err := fake.WaitDeliveries(ctx, 20); err != nil {
		t.Fatalf("waiting for 20 deliveries: %v", err)
	}
	if got := most.Load(); got > concurrency || got < 2 {
		t.Fatalf("at most %d requests in flight at once, want between 2 and Concurrency (%d)", got, concurrency)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
