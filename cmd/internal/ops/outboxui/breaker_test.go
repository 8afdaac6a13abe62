package outboxui_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// The overview's runs panel says why a breaker paused a run: its own, with
// the figures, or its topic's.
func TestOverviewSaysWhyTheBreakerPausedARun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	members := func(run string, n int) []outbox.Intent {
		out := make([]outbox.Intent, n)
		for i := range out {
			out[i] = outbox.Intent{Key: fmt.Sprintf("%s:%d", run, i), Payload: email(fmt.Sprintf("c%d@example.com", i), "News")}
		}
		return out
	}
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		if _, err := h.ob.EnqueueRun(h.ctx, tx, outbox.Run{Key: "campaign:stale", Breaker: &outbox.Breaker{BounceRate: 0.2, MinOutcomes: 10},
			Intents: members("campaign:stale", 20)}); err != nil {
			return err
		}
		_, err := h.ob.EnqueueRun(h.ctx, tx, outbox.Run{Key: "campaign:later", Topic: "news", Intents: members("campaign:later", 5)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Ten members sent, two of them bounced: 20% of 10 known outcomes.
	pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, sent_at = now(), message_id = 'em_' || id
		WHERE run_key = 'campaign:stale' AND idempotency_key < 'campaign:stale:18'`)
	for i := range 10 {
		typ := "email.delivered"
		if i < 2 {
			typ = "email.bounced"
		}
		pgtest.Exec(t, h.pool, `SELECT sendonce_delivery_apply(id, $2, clock_timestamp()) FROM sendonce_outbox WHERE idempotency_key = $1`,
			fmt.Sprintf("campaign:stale:%d", i), typ)
	}
	// The topic's breaker, tripped by hand as a trip records it.
	pgtest.Exec(t, h.pool, `UPDATE sendonce_run SET state = 'paused', pause_reason = 'topic news: bounce rate 6.0% (60 of 1000 known outcomes) >= 5% threshold'
		WHERE key = 'campaign:later'`)
	code, body := h.do("GET", "/outbox/", nil)
	if code != 200 {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{
		"by its breaker: bounce rate 20.0% (2 of 10 known outcomes) &gt;= 20% threshold",
		"by its breaker: topic news: bounce rate 6.0% (60 of 1000 known outcomes) &gt;= 5% threshold",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview does not say %q", want)
		}
	}
}
