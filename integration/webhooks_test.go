package integration

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// webhookSecret signs the fake's webhook events. Like the API key, it must
// appear in nothing the processes print.
const webhookSecret = "whsec_SECRETw3bh00kN0tForPrint1ng9d2c41a7"

// freeLoopbackAddr picks a free port on 127.0.0.1 for a process to listen on.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestWebhooks sends 500 emails through two workers, one of which takes the
// fake's signed delivery webhooks: about 10% of the recipients bounce and 2%
// complain, 20% of the events are POSTed twice and 10% arrive out of order.
// Every intent ends with the delivery status its recipient earned, every
// delivery id is stored exactly once, the duplicates were not stored twice,
// every send went exactly once, and the webhook secret is printed nowhere.
// The bounced and complaining addresses end on the suppression list, and
// the next intent to each is parked as suppressed without an API call.
func TestWebhooks(t *testing.T) {
	setup(t)
	start := time.Now()
	ctx := context.Background()
	n := 500 * suite.scale

	// Recipients: a token in the address decides the event the fake makes.
	rng := rngFor("webhooks")
	intents := make([]intent, n)
	want := map[string]string{} // intent key → the delivery status it must end with
	wantCount := map[string]int{}
	for i := range intents {
		key := fmt.Sprintf("webhooks:%05d", i)
		status, token := "delivered", ""
		switch r := rng.IntN(100); {
		case r < 2:
			status, token = "complained", "-complain"
		case r < 12:
			status, token = "bounced", "-bounce"
		}
		intents[i] = emailIntent(key, fmt.Sprintf("wh-%05d%s@example.test", i, token))
		want[key] = status
		wantCount[status]++
	}

	hookAddr := freeLoopbackAddr(t)
	srv := fakeapi.NewTest(t, fakeapi.Config{
		APIKeys:       []string{apiKey},
		Seed:          seedFor("webhooks"),
		WebhookURL:    "http://" + hookAddr + "/webhooks/openemail",
		WebhookSecret: webhookSecret,
		Faults: mustFaults(t,
			"bounce;to=-bounce@",
			"complain;to=-complain@",
			"webhook_duplicate;p=0.2",
			"webhook_out_of_order;p=0.1",
		),
	})
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "webhooks")
	e := processEnv(dbURL, srv)
	e.Extra = append(e.Extra, "OPENEMAIL_WEBHOOK_SECRET="+webhookSecret)

	// worker0 takes the webhooks; it listens before anything is sent, so no
	// event meets a closed port.
	w0 := startProc(t, "worker0", e, append(workerArgs(t, workerOptions{}), "--webhook-addr", hookAddr)...)
	waitFor(t, 30*time.Second, "worker0's webhook listener", func() (bool, string) {
		if !w0.running() {
			t.Fatalf("worker0 exited: %v\n%s", w0.err, w0.output())
		}
		return strings.Contains(w0.stdout.String(), "webhooks=http://"+hookAddr), tail(w0.stdout.String(), 300)
	})
	w1 := startWorker(t, "worker1", e, workerOptions{})
	workers := []*proc{w0, w1}
	enqueueGo(t, pool, intents)

	if !waitAllSent(t, pool, n, 2*time.Minute, nil) {
		for _, w := range workers {
			t.Log(w.output())
		}
		t.FailNow()
	}
	// One event per delivery (no delay_then_bounce): n distinct events.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := srv.WaitWebhooks(wctx, n)
	cancel()
	if err != nil {
		t.Fatalf("waiting for %d webhook events: %v (%d sent)", n, err, srv.WebhooksSent())
	}
	waitFor(t, 30*time.Second, "every intent to have a delivery status", func() (bool, string) {
		c, err := countBy(ctx, pool, `SELECT coalesce(delivery_status, 'none'), count(*) FROM sendonce_outbox GROUP BY 1`)
		if err != nil {
			return false, err.Error()
		}
		return c["none"] == 0 && c.total() == n, c.String()
	})

	// The bounced and complaining addresses are on the suppression list
	// (the fake's events name them in data.to), and the next intent to each
	// of them is parked as suppressed with no API call.
	var wantSuppressed []string
	var next []intent
	for _, in := range intents {
		if want[in.Key] != "delivered" {
			wantSuppressed = append(wantSuppressed, strings.ToLower(in.Recipients[0]))
			next = append(next, emailIntent("webhooks-next:"+strings.TrimPrefix(in.Key, "webhooks:"), in.Recipients[0]))
		}
	}
	sort.Strings(wantSuppressed)
	suppressed, err := queryStrings(ctx, pool, `SELECT address FROM sendonce_suppression ORDER BY address`)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(suppressed) != fmt.Sprint(wantSuppressed) {
		t.Errorf("suppression list: %d addresses, want the %d bounced or complaining ones", len(suppressed), len(wantSuppressed))
	}
	requestsBefore := len(srv.Requests())
	enqueueGo(t, pool, next)
	waitFor(t, 30*time.Second, "the next intents to bounced and complaining addresses to settle", func() (bool, string) {
		c, err := countBy(ctx, pool, `SELECT state, count(*) FROM sendonce_outbox WHERE idempotency_key LIKE 'webhooks-next:%' GROUP BY 1`)
		if err != nil {
			return false, err.Error()
		}
		return c["pending"]+c["sending"] == 0 && c.total() == len(next), c.String()
	})
	c, err := countBy(ctx, pool, `SELECT state, count(*) FROM sendonce_outbox WHERE idempotency_key LIKE 'webhooks-next:%' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if c["suppressed"] != len(next) {
		t.Errorf("the next intents to suppressed addresses: %s, want all %d suppressed", c, len(next))
	}
	nextCalls := 0
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.IdempotencyKey, "webhooks-next:") {
			nextCalls++
		}
	}
	if nextCalls != 0 || len(srv.Requests()) != requestsBefore {
		t.Errorf("%d API requests for the suppressed intents (%d in all since they were enqueued), want 0", nextCalls, len(srv.Requests())-requestsBefore)
	}

	for _, w := range workers {
		w.stop(t)
	}

	// Each intent's final status is the one its recipient earned.
	got := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, coalesce(delivery_status, '') FROM sendonce_outbox
		WHERE idempotency_key NOT LIKE 'webhooks-next:%'`)
	if err != nil {
		t.Fatal(err)
	}
	wrong := 0
	for rows.Next() {
		var key, status string
		if err := rows.Scan(&key, &status); err != nil {
			t.Fatal(err)
		}
		got[status]++
		if status != want[key] {
			if wrong++; wrong <= 10 {
				t.Errorf("intent %s: delivery status %q, want %q", key, status, want[key])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if wrong > 0 {
		t.Errorf("%d intents with a wrong delivery status: got %v, want %v", wrong, got, wantCount)
	}

	// What the fake sent: distinct delivery ids, duplicates (a second copy),
	// events held out of order, and every last attempt answered 2xx.
	sentIDs := map[string]bool{}
	dupIDs := map[string]bool{}
	oooIDs := map[string]bool{}
	lastStatus := map[string]int{}
	for _, a := range srv.Webhooks() {
		sentIDs[a.DeliveryID] = true
		lastStatus[a.DeliveryID] = a.Status
		if a.Copy == 2 {
			dupIDs[a.DeliveryID] = true
		}
		if strings.Contains(a.Fault, "webhook_out_of_order") {
			oooIDs[a.DeliveryID] = true
		}
	}
	for id, st := range lastStatus {
		if st < 200 || st > 299 {
			t.Errorf("webhook delivery %s: last answer %d, want 2xx", id, st)
		}
	}
	if len(sentIDs) != n {
		t.Errorf("the fake sent %d distinct delivery ids, want %d (one per email)", len(sentIDs), n)
	}

	// sendonce_event holds each delivery id the fake sent, exactly once.
	var total, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT delivery_id) FROM sendonce_event`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != distinct || distinct != len(sentIDs) {
		t.Errorf("sendonce_event: %d rows, %d distinct delivery ids; the fake sent %d distinct", total, distinct, len(sentIDs))
	}
	stored, err := queryStrings(ctx, pool, `SELECT delivery_id FROM sendonce_event`)
	if err != nil {
		t.Fatal(err)
	}
	storedSet := map[string]int{}
	for _, id := range stored {
		storedSet[id]++
	}
	var missing []string
	for id := range sentIDs {
		if storedSet[id] != 1 {
			missing = append(missing, fmt.Sprintf("%s (stored %d times)", id, storedSet[id]))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d delivery ids the fake sent are not stored exactly once, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if len(dupIDs) == 0 {
		t.Errorf("the fake sent no duplicate webhook (webhook_duplicate;p=0.2 over %d events): the scenario proved nothing about duplicates", n)
	}
	for id := range dupIDs {
		if storedSet[id] != 1 {
			t.Errorf("duplicated delivery %s stored %d times, want once", id, storedSet[id])
		}
	}
	if len(oooIDs) == 0 {
		t.Errorf("no webhook event was sent out of order (webhook_out_of_order;p=0.1 over %d events)", n)
	}
	var unmatched int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_event WHERE intent_id IS NULL`).Scan(&unmatched); err != nil {
		t.Fatal(err)
	}
	if unmatched != 0 {
		t.Errorf("%d events left unmatched to their intent", unmatched)
	}

	checkExactlyOnce(t, srv, pool, intents)

	// The webhook secret appears in nothing this scenario's processes printed.
	for _, c := range allCaptures() {
		if !strings.HasPrefix(c.name, t.Name()+"/") {
			continue
		}
		if text := c.String(); strings.Contains(text, webhookSecret) {
			i := strings.Index(text, webhookSecret)
			t.Errorf("the webhook secret appears in %s: …%s…", c.name, text[max(0, i-80):min(len(text), i+len(webhookSecret)+40)])
		}
	}

	summary(t, "webhooks: seed=%d intents=%d bounced=%d complained=%d delivered=%d events=%d duplicates_sent=%d out_of_order=%d suppressed_next=%d/%d api_calls_for_them=%d elapsed=%s",
		suite.seed, n, got["bounced"], got["complained"], got["delivered"], distinct, len(dupIDs), len(oooIDs),
		c["suppressed"], len(next), nextCalls,
		time.Since(start).Round(time.Second))
}
