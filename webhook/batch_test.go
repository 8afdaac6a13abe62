package webhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

const batchBody = `{"emails":[
	{"from":"billing@example.com","to":["p@example.com"],"subject":"Invoice","text":"x"},
	{"from":"billing@example.com","to":["q@example.com"],"subject":"Invoice","text":"x"}]}`

func (e *env) enqueueBatch(key string) {
	e.t.Helper()
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := e.ob.Enqueue(context.Background(), tx, outbox.Intent{Key: key, Kind: outbox.KindBatch, Payload: batchBody})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// matched returns the intent id an event was matched to, or 0.
func (e *env) matched(eventID string) int64 {
	e.t.Helper()
	return outboxtest.Value[int64](e.t, e.pool, `SELECT coalesce(intent_id, 0) FROM sendonce_event WHERE event_id = $1`, eventID)
}

// TestBatchIntentMatchesEachMessage: a batch intent's send has a message id
// per email, and the events of each match the intent; its delivery status
// is the highest-ranked of its messages'.
func TestBatchIntentMatchesEachMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Now().Add(-time.Minute)

	// Sent first, events after.
	e.enqueueBatch("batch:1")
	e.send("batch:1", "em_p,em_q")
	id := outboxtest.Get(t, e.ob, "batch:1").ID
	e.post(evBody("b1", "email.delivered", "em_p", t0), "")
	if got := e.matched("b1"); got != id {
		t.Errorf("the first message's event matched intent %d, want %d", got, id)
	}
	if got := e.status("batch:1"); got != outbox.DeliveryDelivered {
		t.Errorf("after em_p delivered: delivery %q, want delivered", got)
	}
	e.post(evBody("b2", "email.bounced", "em_q", t0.Add(time.Second)), "")
	if got := e.matched("b2"); got != id {
		t.Errorf("the second message's event matched intent %d, want %d", got, id)
	}
	// A later delivered for em_p does not hide em_q's bounce.
	e.post(evBody("b3", "email.delivered", "em_p", t0.Add(2*time.Second)), "")
	if got := e.status("batch:1"); got != outbox.DeliveryBounced {
		t.Errorf("after em_q bounced: delivery %q, want bounced", got)
	}
	if rec := outboxtest.Get(t, e.ob, "batch:1"); rec.MessageID != "em_p,em_q" {
		t.Errorf("message id %q, want em_p,em_q", rec.MessageID)
	}

	// Events first, the send's record after: the sweeper matches them.
	e.enqueueBatch("batch:2")
	e.post(evBody("b4", "email.delivered", "em_r", t0), "")
	e.post(evBody("b5", "email.complained", "em_s", t0), "")
	e.send("batch:2", "em_r,em_s")
	id2 := outboxtest.Get(t, e.ob, "batch:2").ID
	for _, ev := range []string{"b4", "b5"} {
		if got := e.matched(ev); got != id2 {
			t.Errorf("event %s matched intent %d, want %d", ev, got, id2)
		}
	}
	if got := e.status("batch:2"); got != outbox.DeliveryComplained {
		t.Errorf("batch:2: delivery %q, want complained", got)
	}

	// Only whole ids match: not a part of one, nor the joined text.
	for _, email := range []string{"em_", "em_r,em_s", "m_r"} {
		ev := "x" + email
		e.post(evBody(ev, "email.bounced", email, t0), "")
		if got := e.matched(ev); got != 0 {
			t.Errorf("an event about %q matched intent %d", email, got)
		}
	}
}
