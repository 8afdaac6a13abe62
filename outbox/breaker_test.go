package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// sendMembers marks members [from, to) of the run prefix sent, each with a
// message id of its own (the drain's record of the API's answer).
func sendMembers(t *testing.T, pool *pgxpool.Pool, prefix string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		key := fmt.Sprintf("%s:%d", prefix, i)
		if _, err := pool.Exec(context.Background(), `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, sent_at = now(),
			message_id = 'em_' || $1 WHERE idempotency_key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
}

// outcome applies event type typ to member i of run prefix as the
// webhook's transaction does (sendonce_delivery_apply, which
// sendonce_event_match calls), in a transaction of its own.
func outcome(t *testing.T, pool *pgxpool.Pool, prefix string, i int, typ string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT sendonce_delivery_apply(id, $2, clock_timestamp())
		FROM sendonce_outbox WHERE idempotency_key = $1`, fmt.Sprintf("%s:%d", prefix, i), typ); err != nil {
		t.Fatal(err)
	}
}

func outcomes(t *testing.T, pool *pgxpool.Pool, prefix string, from, to int, typ string) {
	t.Helper()
	for i := from; i < to; i++ {
		outcome(t, pool, prefix, i, typ)
	}
}

func runState(t *testing.T, ob *outbox.Outbox, key string) *outbox.RunStatus {
	t.Helper()
	st, err := ob.RunStatus(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRunBreakerTrips: the breaker pauses a run in the transaction of the
// outcome that brings the hard-bounce rate to its threshold with the
// minimum of known outcomes, never before the minimum; the drain then
// claims none of its members, and the run says why.
func TestRunBreakerTrips(t *testing.T) {
	t.Parallel()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "news:1", Intents: members("news:1", 300)}); err != nil {
		t.Fatal(err)
	}
	sendMembers(t, pool, "news:1", 0, 200)
	// 10 bounces of the first 20 outcomes: 50%, but under the minimum.
	outcomes(t, pool, "news:1", 0, 10, "email.bounced")
	outcomes(t, pool, "news:1", 10, 20, "email.delivered")
	if st := runState(t, ob, "news:1"); st.State != outbox.RunActive || st.Breaker.Known != 20 || st.Breaker.Bounced != 10 {
		t.Fatalf("under the minimum: %s, breaker %+v; want active with 20 known, 10 bounced", st.State, st.Breaker)
	}
	// 99 known, 10 bounced; a delayed delivery is no outcome.
	outcomes(t, pool, "news:1", 20, 99, "email.delivered")
	outcome(t, pool, "news:1", 150, "email.delivery_delayed")
	if st := runState(t, ob, "news:1"); st.State != outbox.RunActive || st.Breaker.Known != 99 {
		t.Fatalf("at 99 known outcomes: %s, %d known; want active, 99", st.State, st.Breaker.Known)
	}
	// The 100th outcome, a delivery, brings the known outcomes to the
	// minimum with 10% bounced.
	outcome(t, pool, "news:1", 99, "email.delivered")
	st := runState(t, ob, "news:1")
	const want = "bounce rate 10.0% (10 of 100 known outcomes) >= 5% threshold"
	if st.State != outbox.RunPaused || st.Breaker.Reason != want || st.Breaker.TrippedAt == nil ||
		st.Breaker.TripKnown != 100 || st.Breaker.TripBounced != 10 {
		t.Fatalf("at the minimum: %s, breaker %+v; want paused, %q", st.State, st.Breaker, want)
	}
	if got := drainKeys(t, pool, ""); len(got) != 0 {
		t.Fatalf("the drain would claim %v of a run the breaker paused, want none", got)
	}
	// Outcomes still coming in are counted; the run stays paused, its
	// reason as it was.
	outcomes(t, pool, "news:1", 100, 110, "email.bounced")
	if st := runState(t, ob, "news:1"); st.State != outbox.RunPaused || st.Breaker.Reason != want || st.Breaker.Bounced != 20 {
		t.Fatalf("after more bounces: %s, breaker %+v", st.State, st.Breaker)
	}
}

// TestRunBreakerThresholds: exactly at the threshold trips, just under it
// does not; complaints trip at their own threshold; a breaker that is off
// never trips; the thresholds and minimum are the run's own.
func TestRunBreakerThresholds(t *testing.T) {
	t.Parallel()
	pool, ob := setup(t)
	// The runs' own breakers alone: together these runs' outcomes would
	// trip their tenant's (TestTenantBreakerPausesTheTenantsRuns).
	if err := ob.SetBreaker(context.Background(), outbox.BreakerTenant, outbox.BreakerDefaults, outbox.Breaker{Off: true}); err != nil {
		t.Fatal(err)
	}
	runs := []struct {
		key     string
		breaker *outbox.Breaker
		bounced int // of 200 outcomes, the first ones
		typ     string
		want    string // the reason; "" stays active
	}{
		{"under", nil, 9, "email.bounced", ""},
		{"at", nil, 10, "email.bounced", "bounce rate 5.0% (10 of 200 known outcomes) >= 5% threshold"},
		{"complaint", &outbox.Breaker{MinOutcomes: 200}, 1, "email.complained", "complaint rate 0.50% (1 of 200 known outcomes) >= 0.1% threshold"},
		{"off", &outbox.Breaker{Off: true}, 100, "email.bounced", ""},
		{"own", &outbox.Breaker{BounceRate: 0.2, MinOutcomes: 200}, 39, "email.bounced", ""},
		{"own-at", &outbox.Breaker{BounceRate: 0.2, MinOutcomes: 200}, 40, "email.bounced", "bounce rate 20.0% (40 of 200 known outcomes) >= 20% threshold"},
	}
	for _, r := range runs {
		if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: r.key, Intents: members(r.key, 201), Breaker: r.breaker}); err != nil {
			t.Fatal(err)
		}
		sendMembers(t, pool, r.key, 0, 200)
		// The delivered first, so that the minimum is reached with the
		// last of the bad outcomes (199 known: under any minimum here).
		outcomes(t, pool, r.key, r.bounced, 200, "email.delivered")
		outcomes(t, pool, r.key, 0, r.bounced, r.typ)
	}
	for _, r := range runs {
		st := runState(t, ob, r.key)
		wantState := outbox.RunActive
		if r.want != "" {
			wantState = outbox.RunPaused
		}
		if st.State != wantState || st.Breaker.Reason != r.want {
			t.Errorf("run %s: %s, %q; want %s, %q", r.key, st.State, st.Breaker.Reason, wantState, r.want)
		}
	}
	if st := runState(t, ob, "off"); !st.Breaker.Off || st.Breaker.Bounced != 100 {
		t.Errorf("the breaker that is off: %+v", st.Breaker)
	}
	// Invalid settings are refused before anything is written.
	for _, b := range []outbox.Breaker{{BounceRate: 1.5}, {ComplaintRate: -0.1}, {MinOutcomes: -1}} {
		if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "bad", Intents: members("bad", 1), Breaker: &b}); err == nil ||
			!strings.Contains(err.Error(), "breaker") {
			t.Errorf("breaker %+v: %v, want an invalid-breaker error", b, err)
		}
	}
}

// TestRunBreakerCounts: the counts follow each member's delivery status as
// it moves (delivered, then bounced, then complained) and match the
// table's; intents of no run are never counted, nor their run paused; a
// run with nothing left to send is not paused.
func TestRunBreakerCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "done", Intents: members("done", 150)}); err != nil {
		t.Fatal(err)
	}
	sendMembers(t, pool, "done", 0, 150)
	outcomes(t, pool, "done", 0, 150, "email.delivered")
	outcomes(t, pool, "done", 0, 30, "email.bounced")
	outcomes(t, pool, "done", 20, 40, "email.complained")
	st := runState(t, ob, "done")
	var known, bounced, complained int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE delivery_status IN ('delivered', 'bounced', 'complained')),
		count(*) FILTER (WHERE delivery_status = 'bounced'), count(*) FILTER (WHERE delivery_status = 'complained')
		FROM sendonce_outbox WHERE run_key = 'done'`).Scan(&known, &bounced, &complained); err != nil {
		t.Fatal(err)
	}
	if st.Breaker.Known != known || st.Breaker.Bounced != bounced || st.Breaker.Complained != complained ||
		known != 150 || bounced != 20 || complained != 20 {
		t.Fatalf("breaker counts %+v; the table has %d known, %d bounced, %d complained (want 150, 20, 20)",
			st.Breaker, known, bounced, complained)
	}
	if st.State != outbox.RunDone || st.Breaker.Reason != "" {
		t.Fatalf("a run with nothing left to send: %s, %q; want done, no reason", st.State, st.Breaker.Reason)
	}
	// Transactional intents bounce freely: nothing of any run moves.
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "lone:1", Payload: invoiceBody}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET state = 'sent', message_id = 'em_lone' WHERE idempotency_key = 'lone:1';
		SELECT sendonce_delivery_apply(id, 'email.bounced', now()) FROM sendonce_outbox WHERE idempotency_key = 'lone:1'`); err != nil {
		t.Fatal(err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_run_outcome WHERE run_key <> 'done'`); n != 0 {
		t.Fatalf("%d outcome rows of no run, want 0", n)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunBreakerResume: a run the breaker paused resumes by hand; the
// breaker then judges only the outcomes after the resume, so the same
// figures do not pause it again, and new ones past the threshold do. A
// resume with the settings unchanged is logged as a warning naming the run
// and the figures; one after SetRunBreaker is not.
func TestRunBreakerResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := setup(t)
	var logs syncBuffer
	ob, err := outbox.New(pool, &outbox.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "r", Intents: members("r", 600)}); err != nil {
		t.Fatal(err)
	}
	sendMembers(t, pool, "r", 0, 400)
	outcomes(t, pool, "r", 10, 100, "email.delivered")
	outcomes(t, pool, "r", 0, 10, "email.bounced")
	if st := runState(t, ob, "r"); st.State != outbox.RunPaused {
		t.Fatalf("run %s, want paused by the breaker", st.State)
	}
	st, err := ob.ResumeRun(ctx, "r")
	if err != nil || st.State != outbox.RunActive || st.Breaker.Reason != "" || st.Breaker.Known != 0 || st.Breaker.TripKnown != 100 {
		t.Fatalf("ResumeRun = %+v (breaker %+v), %v; want active, counts from 0, the trip's figures kept", st, st.Breaker, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "run=r") ||
		!strings.Contains(l, "bounce rate 10.0% (10 of 100 known outcomes)") {
		t.Fatalf("a resume with the settings unchanged logged %q, want a warning naming the run and the figures", l)
	}
	// A late bounce of a member sent before the pause: 1 of 1 known
	// since the resume, under the minimum.
	outcome(t, pool, "r", 100, "email.bounced")
	if st := runState(t, ob, "r"); st.State != outbox.RunActive || st.Breaker.Known != 1 {
		t.Fatalf("after the resume: %s, breaker %+v; want active, 1 known", st.State, st.Breaker)
	}
	// 100 more, 6 bounced: paused again, on the figures since the resume.
	outcomes(t, pool, "r", 101, 195, "email.delivered")
	outcomes(t, pool, "r", 195, 200, "email.bounced")
	st = runState(t, ob, "r")
	if want := "bounce rate 6.0% (6 of 100 known outcomes) >= 5% threshold since the last resume"; st.State != outbox.RunPaused || st.Breaker.Reason != want {
		t.Fatalf("after the resume's own outcomes: %s, %q; want paused, %q", st.State, st.Breaker.Reason, want)
	}
	// Raised thresholds, then a resume: not warned about.
	if _, err := ob.SetRunBreaker(ctx, "r", outbox.Breaker{BounceRate: 0.1, MinOutcomes: 200}); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(logs.String(), "level=WARN")
	if st, err = ob.ResumeRun(ctx, "r"); err != nil || st.State != outbox.RunActive || st.Breaker.BounceRate != 0.1 || st.Breaker.MinOutcomes != 200 {
		t.Fatalf("ResumeRun = %+v, %v", st, err)
	}
	if after := strings.Count(logs.String(), "level=WARN"); after != before {
		t.Fatalf("a resume after a change of the settings logged a warning: %q", logs.String())
	}
	if got := drainKeys(t, pool, ""); !slices.Contains(got, "r:400") {
		t.Fatalf("the drain would claim %v after the resume, want the run's unsent members", got)
	}
	if _, err := ob.SetRunBreaker(ctx, "nope", outbox.Breaker{}); err == nil {
		t.Fatal("SetRunBreaker of no run: no error")
	}
}
