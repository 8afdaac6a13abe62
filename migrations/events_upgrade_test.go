package migrations_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/webhook"
)

// eventsVersion is the last migration before events were keyed by their
// signed id and suppression ordered by event time.
const eventsVersion = 10

// TestUpgradeKeepsEvents: a database whose events were stored per delivery
// id (one event stored twice under two delivery ids, the suppression list
// kept by arrival) is migrated: each event is kept once, matched and
// applied as before, and the handler goes on with it: a replay of a stored
// event is a duplicate, and events older than the list's stored changes
// arriving late change nothing.
func TestUpgradeKeepsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.CreateDB(t, pgtest.ServerURL(t), "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.UpTo(ctx, pool, eventsVersion); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := func(id, typ, email, addr string, at time.Time) string {
		return fmt.Sprintf(`{"id":%q,"type":%q,"createdAt":%q,"data":{"emailId":%q,"to":[%q]}}`,
			id, typ, at.Format(time.RFC3339Nano), email, addr)
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, state, attempts, message_id, sent_at)
		VALUES ('sent:1', '{"from":"a@example.com","to":["ada@example.com"],"subject":"s","text":"x"}', 'sent', 1, 'em_1', now())`)
	insert := func(delivery, id, typ, email, addr string, at time.Time, matched, applied bool) {
		t.Helper()
		pgtest.Exec(t, pool, `INSERT INTO sendonce_event (delivery_id, event_id, type, email_id, occurred_at, raw, intent_id, suppression_applied, received_at)
			VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, CASE WHEN $7 THEN (SELECT id FROM sendonce_outbox WHERE message_id = $4) END, $8,
				now() - interval '1 minute' + $9 * interval '1 second')`,
			delivery, id, typ, email, at, ev(id, typ, email, addr, at), matched, applied, len(delivery))
	}
	// evt_1 stored twice: first unmatched (it beat the send's record),
	// again under another delivery id, matched, applied to the list.
	insert("d1", "evt_1", "email.bounced", "em_1", "ada@example.com", at(10), false, false)
	insert("dd2", "evt_1", "email.bounced", "em_1", "ada@example.com", at(10), true, true)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_suppression (address, reason, source) VALUES ('ada@example.com', 'bounced', 'webhook dd2')`)
	// bo was taken off by the API at t0+20.
	insert("ddd3", "evt_2", "suppression.removed", "em_2", "bo@example.com", at(20), false, true)

	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if len(res.Sendonce) == 0 {
		t.Error("nothing to migrate")
	}
	var rows, intents int
	var delivery string
	var applied bool
	if err := pool.QueryRow(ctx, `SELECT count(*), count(intent_id), min(delivery_id), bool_and(suppression_applied)
		FROM sendonce_event WHERE event_id = 'evt_1'`).Scan(&rows, &intents, &delivery, &applied); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || intents != 1 || delivery != "dd2" || !applied {
		t.Errorf("evt_1 after the upgrade: %d rows, %d matched, delivery %q, applied %v; want 1 row, matched, dd2, applied",
			rows, intents, delivery, applied)
	}

	h, err := webhook.New(pool, []string{"whsec_upgrade"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	post := func(body, delivery string) string {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(body)))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign("whsec_upgrade", time.Now(), []byte(body)))
		req.Header.Set(webhook.DeliveryHeader, delivery)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%s: status %d: %s", delivery, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if got := post(ev("evt_1", "email.bounced", "em_1", "ada@example.com", at(10)), "d_new"); !bytes.Contains([]byte(got), []byte(`"duplicate":true`)) {
		t.Errorf("evt_1 posted again after the upgrade: %s, want a duplicate", got)
	}
	// Older than what the list holds of ada (bounced at t0+10) and of bo
	// (removed at t0+20): no change.
	post(ev("evt_3", "suppression.removed", "em_3", "ada@example.com", at(5)), "d4")
	post(ev("evt_4", "email.bounced", "em_4", "bo@example.com", at(15)), "d5")
	var list []string
	rowsList, err := pool.Query(ctx, `SELECT address FROM sendonce_suppression ORDER BY address`)
	if err != nil {
		t.Fatal(err)
	}
	for rowsList.Next() {
		var a string
		if err := rowsList.Scan(&a); err != nil {
			t.Fatal(err)
		}
		list = append(list, a)
	}
	if len(list) != 1 || list[0] != "ada@example.com" {
		t.Errorf("suppression list after late older events: %v, want [ada@example.com]", list)
	}
}
