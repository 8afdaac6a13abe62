package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sendonce/sendonce/cmd/internal/ops/metrics"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// scrape returns the exposition text of m's handler.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func wantLine(t *testing.T, text, line string) {
	t.Helper()
	for l := range strings.SplitSeq(text, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("exposition lacks %q", line)
}

func TestObserveCountsOutcomes(t *testing.T) {
	m := metrics.New()
	var obs worker.Observer = m
	for range 3 {
		obs.Observe(worker.Outcome{Kind: outbox.KindEmail, Result: worker.ResultSent, APILatency: 20 * time.Millisecond})
	}
	obs.Observe(worker.Outcome{Kind: outbox.KindBatch, Result: worker.ResultReplayed, APILatency: time.Second})
	obs.Observe(worker.Outcome{Kind: outbox.KindEmail, Result: worker.ResultRetry, APILatency: 2 * time.Second})
	obs.Observe(worker.Outcome{Kind: outbox.KindEmail, Result: worker.ResultRetry, APILatency: 2 * time.Second})
	obs.Observe(worker.Outcome{Kind: outbox.KindTemplate, Result: worker.ResultSkipped}) // no API call

	text := scrape(t, m)
	for _, l := range []string{
		`sendonce_sends_total{kind="email",result="sent"} 3`,
		`sendonce_sends_total{kind="batch",result="replayed"} 1`,
		`sendonce_sends_total{kind="email",result="retry"} 2`,
		`sendonce_sends_total{kind="template",result="skipped"} 1`,
		`sendonce_sends_total{kind="broadcast",result="failed"} 0`, // pre-initialised
		`sendonce_replays_total 1`,
		`sendonce_retries_total 2`,
		`sendonce_api_call_duration_seconds_count{kind="email"} 5`,
		`sendonce_api_call_duration_seconds_count{kind="batch"} 1`,
		`sendonce_api_call_duration_seconds_count{kind="template"} 0`,
		`sendonce_api_call_duration_seconds_bucket{kind="email",le="0.025"} 3`,
	} {
		wantLine(t, text, l)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(text, "\n"+name+" ") {
			t.Errorf("exposition lacks the %s collector", name)
		}
	}
}

// TestUnsubscribedCounts: the unsubscribe endpoint's count shows once an
// address is unsubscribed, by topic and source, and not before.
func TestUnsubscribedCounts(t *testing.T) {
	m := metrics.New()
	if strings.Contains(scrape(t, m), "sendonce_unsubscribes_total") {
		t.Errorf("sendonce_unsubscribes_total is served before any unsubscribe")
	}
	m.Unsubscribed("digest", outbox.UnsubscribeOneClick)
	m.Unsubscribed("digest", outbox.UnsubscribeOneClick)
	m.Unsubscribed("digest", outbox.UnsubscribePage)
	text := scrape(t, m)
	wantLine(t, text, `sendonce_unsubscribes_total{source="`+outbox.UnsubscribeOneClick+`",topic="digest"} 2`)
	wantLine(t, text, `sendonce_unsubscribes_total{source="`+outbox.UnsubscribePage+`",topic="digest"} 1`)
}

func TestInstrumentTransportCountsEveryAttempt(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()

	m := metrics.New()
	hc := &http.Client{Transport: m.InstrumentTransport(nil)}
	for range 2 {
		resp, err := hc.Post(srv.URL+"/emails", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A request that gets no response at all.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := hc.Get(dead.URL + "/emails/em_1"); err == nil {
		t.Fatal("GET on a closed server: no error")
	}

	text := scrape(t, m)
	wantLine(t, text, `sendonce_api_requests_total{code="503",method="post"} 1`)
	wantLine(t, text, `sendonce_api_requests_total{code="200",method="post"} 1`)
	wantLine(t, text, `sendonce_api_request_duration_seconds_count{method="post"} 2`)
	wantLine(t, text, `sendonce_api_request_errors_total{method="get"} 1`)
}

func TestWatchOutboxReadsTheDatabaseAtScrapeTime(t *testing.T) {
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.WatchOutbox(ob, 0, nil)
	wantLine(t, scrape(t, m), `sendonce_outbox_intents{state="pending"} 0`)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"m:1", "m:2"} {
		body, _ := json.Marshal(map[string]any{"from": "a@example.com", "to": "b@example.com", "subject": "s", "text": "t"})
		if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: key, Payload: body}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Cancel(ctx, "m:2"); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	wantLine(t, text, `sendonce_outbox_intents{state="pending"} 1`)
	wantLine(t, text, `sendonce_outbox_intents{state="canceled"} 1`)
	wantLine(t, text, `sendonce_outbox_intents{state="sent"} 0`)
	if !strings.Contains(text, "\nsendonce_outbox_oldest_pending_age_seconds ") {
		t.Error("exposition lacks sendonce_outbox_oldest_pending_age_seconds")
	}
}

// brokenDB fails, as a database that is down does.
type brokenDB struct{}

func (brokenDB) Stats(context.Context) (*outbox.Stats, error) {
	return nil, errors.New("database is down")
}

func TestWatchOutboxReportsNothingWhenTheDatabaseIsDown(t *testing.T) {
	m := metrics.New()
	m.WatchOutbox(brokenDB{}, time.Second, nil)
	text := scrape(t, m)
	if strings.Contains(text, "sendonce_outbox_") {
		t.Errorf("outbox metrics reported while the database is down:\n%s", text)
	}
	// The rest of the scrape is unaffected.
	if !strings.Contains(text, "sendonce_sends_total") {
		t.Error("the scrape lost the other metrics")
	}
	if n := testutil.CollectAndCount(m.Registry, "sendonce_outbox_intents"); n != 0 {
		t.Errorf("sendonce_outbox_intents: %d series", n)
	}
}

func TestWatchRunsReportsRunsNotDone(t *testing.T) {
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	m := metrics.New()
	m.WatchRuns(ob, 0, nil)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "billing:2026-12", Intents: []outbox.Intent{
			{Key: "b:1", Payload: `{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}`},
			{Key: "b:2", Payload: `{"from":"a@example.com","to":["c@example.com"],"subject":"s","text":"t"}`},
		}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.PauseRun(ctx, "billing:2026-12"); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	wantLine(t, text, `sendonce_run_intents{run="billing:2026-12",run_state="paused",state="pending"} 2`)
	if strings.Contains(text, "sendonce_run_breaker_paused{") {
		t.Errorf("a run paused by hand is reported as paused by its breaker:\n%s", text)
	}
	// Paused by its breaker (the trip's columns, as the trigger sets them).
	if _, err := pool.Exec(ctx, `UPDATE sendonce_run SET pause_reason = 'bounce rate 10.0% (10 of 100 known outcomes) >= 5% threshold'
		WHERE key = 'billing:2026-12'`); err != nil {
		t.Fatal(err)
	}
	wantLine(t, scrape(t, m), `sendonce_run_breaker_paused{reason="bounces",run="billing:2026-12"} 1`)
	if _, err := ob.CancelRun(ctx, "billing:2026-12"); err != nil {
		t.Fatal(err)
	}
	if text := scrape(t, m); strings.Contains(text, "sendonce_run_intents{") {
		t.Errorf("a done run is still reported:\n%s", text)
	}
}
