package outbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// A topic's breaker counts the outcomes of every run of the topic: past
// its threshold it pauses each of them that has members left to send, in
// the transaction of the outcome that crosses it, and a run of the topic
// made while it holds is paused from its start; runs of other topics and
// transactional intents go on. ResumeBreaker resumes them, warns that the
// settings did not change, and judges only the outcomes after it.
func TestTopicBreakerPausesTheTopicsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	var log bytes.Buffer
	ob, err := outbox.New(pool, &outbox.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// The tenants' breakers off: every run here is the default tenant's.
	if err := ob.SetBreaker(ctx, outbox.BreakerTenant, outbox.BreakerDefaults, outbox.Breaker{Off: true}); err != nil {
		t.Fatal(err)
	}
	if err := ob.SetBreaker(ctx, outbox.BreakerTopic, outbox.BreakerDefaults, outbox.Breaker{MinOutcomes: 100}); err != nil {
		t.Fatal(err)
	}
	off := &outbox.Breaker{Off: true} // the runs' own breakers: only the topic's judges
	for _, r := range []outbox.Run{
		{Key: "news:a", Topic: "news", Breaker: off, Intents: members("news:a", 150)},
		{Key: "news:b", Topic: "news", Breaker: off, Intents: members("news:b", 100)},
		{Key: "offers:1", Topic: "offers", Breaker: off, Intents: members("offers:1", 50)},
	} {
		if _, err := enqueueRun(t, pool, ob, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := enqueue(t, pool, ob, outbox.Intent{Key: "welcome:1", Topic: "news", Payload: outboxtest.InvoiceBody}); err != nil {
		t.Fatal(err)
	}
	sendMembers(t, pool, "news:a", 0, 80)
	sendMembers(t, pool, "news:b", 0, 40)
	sendMembers(t, pool, "offers:1", 0, 40)
	// 99 known outcomes of the topic, 4 bounced: under the threshold;
	// the offers' 40, half bounced, are another topic's.
	outcomes(t, pool, "news:a", 0, 2, "email.bounced")
	outcomes(t, pool, "news:a", 2, 62, "email.delivered")
	outcomes(t, pool, "news:b", 0, 2, "email.bounced")
	outcomes(t, pool, "news:b", 2, 37, "email.delivered")
	outcomes(t, pool, "offers:1", 0, 20, "email.bounced")
	outcomes(t, pool, "offers:1", 20, 40, "email.delivered")
	if st := runState(t, ob, "news:a"); st.State != outbox.RunActive {
		t.Fatalf("at 99 known outcomes, 4 bounced: news:a %s", st.State)
	}
	outcome(t, pool, "news:b", 37, "email.bounced") // 5 of 100: 5%
	const why = "topic news: bounce rate 5.0% (5 of 100 known outcomes) >= 5% threshold"
	for _, key := range []string{"news:a", "news:b"} {
		if st := runState(t, ob, key); st.State != outbox.RunPaused || st.Breaker.Reason != why {
			t.Fatalf("%s after the trip: %s, reason %q; want paused, %q", key, st.State, st.Breaker.Reason, why)
		}
	}
	if st := runState(t, ob, "offers:1"); st.State != outbox.RunActive {
		t.Fatalf("another topic's run: %s, want active", st.State)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key = 'welcome:1' AND state = 'pending'`); n != 1 {
		t.Fatal("the topic's transactional intent is not pending")
	}
	bs, err := ob.Breakers(ctx, outbox.BreakerTopic, "news")
	if err != nil || len(bs) != 1 || bs[0].TrippedAt == nil || bs[0].TripKnown != 100 || bs[0].TripBounced != 5 {
		t.Fatalf("Breakers(topic, news) = %+v, %v; want it tripped at 5 of 100", bs, err)
	}
	// A run of the topic made while it holds is paused from its start.
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "news:c", Topic: "news", Intents: members("news:c", 5)}); err != nil {
		t.Fatal(err)
	}
	if st := runState(t, ob, "news:c"); st.State != outbox.RunPaused || st.Breaker.Reason != why {
		t.Fatalf("a run made while the topic's breaker holds: %s, %q", st.State, st.Breaker.Reason)
	}

	resumed, err := ob.ResumeBreaker(ctx, outbox.BreakerTopic, "news")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"news:a", "news:b", "news:c"}; !slices.Equal(resumed, want) {
		t.Fatalf("resumed %v, want %v", resumed, want)
	}
	if !strings.Contains(log.String(), "breaker resumed with its settings unchanged") || !strings.Contains(log.String(), "name=news") {
		t.Errorf("no warning of a resume with unchanged settings: %s", log.String())
	}
	// Judged afresh: one more bounce is 1 of 1, under the minimum.
	outcome(t, pool, "news:a", 62, "email.bounced")
	if st := runState(t, ob, "news:a"); st.State != outbox.RunActive {
		t.Fatalf("after the resume, one bounce paused news:a again: %q", st.Breaker.Reason)
	}
	if bs, _ := ob.Breakers(ctx, outbox.BreakerTopic, "news"); len(bs) != 1 || bs[0].Known != 1 || bs[0].Bounced != 1 || bs[0].TrippedAt != nil {
		t.Fatalf("after the resume: %+v; want 1 known, 1 bounced, not tripped", bs)
	}
}

// A tenant's breaker does the same for the tenant's runs, with settings of
// its own over the tenants' defaults; off, it never trips.
func TestTenantBreakerPausesTheTenantsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	if err := ob.SetBreaker(ctx, outbox.BreakerTenant, "acme", outbox.Breaker{BounceRate: 0.2, MinOutcomes: 10}); err != nil {
		t.Fatal(err)
	}
	if err := ob.SetBreaker(ctx, outbox.BreakerTenant, "globex", outbox.Breaker{Off: true}); err != nil {
		t.Fatal(err)
	}
	off := &outbox.Breaker{Off: true}
	for _, r := range []outbox.Run{
		{Key: "acme:1", Tenant: "acme", Breaker: off, Intents: members("acme:1", 30)},
		{Key: "globex:1", Tenant: "globex", Breaker: off, Intents: members("globex:1", 30)},
	} {
		if _, err := enqueueRun(t, pool, ob, r); err != nil {
			t.Fatal(err)
		}
	}
	sendMembers(t, pool, "acme:1", 0, 20)
	sendMembers(t, pool, "globex:1", 0, 20)
	outcomes(t, pool, "acme:1", 0, 8, "email.delivered")
	outcomes(t, pool, "acme:1", 8, 10, "email.bounced") // 2 of 10: 20%
	outcomes(t, pool, "globex:1", 0, 20, "email.bounced")
	if st := runState(t, ob, "acme:1"); st.State != outbox.RunPaused ||
		st.Breaker.Reason != "tenant acme: bounce rate 20.0% (2 of 10 known outcomes) >= 20% threshold" {
		t.Fatalf("acme:1: %s, %q", st.State, st.Breaker.Reason)
	}
	if st := runState(t, ob, "globex:1"); st.State != outbox.RunActive {
		t.Fatalf("globex:1, its tenant's breaker off: %s, %q", st.State, st.Breaker.Reason)
	}
	if err := ob.SetBreaker(ctx, "team", "x", outbox.Breaker{}); err == nil || !strings.Contains(err.Error(), "breaker scope") {
		t.Fatalf("a scope of neither: %v", err)
	}
	if err := ob.SetBreaker(ctx, outbox.BreakerTopic, "News!", outbox.Breaker{}); err == nil || !strings.Contains(err.Error(), "breaker topic") {
		t.Fatalf("a topic of the wrong shape: %v", err)
	}
}
