package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/webhook"
)

// testWebhookSecret is recognisable, so wantNoLeak proves it never shows.
const testWebhookSecret = "whsec_LEAKCHECK_hook"

func TestWorkWebhooks(t *testing.T) {
	t.Parallel()
	dbURL, _, env := newWorkEnv(t)
	env["OPENEMAIL_WEBHOOK_SECRET"] = "whsec_LEAKCHECK_old, " + testWebhookSecret
	pool := poolFor(t, dbURL)
	for i, key := range []string{"hook:1", "hook:2"} {
		wantOK(t, sendonce(t, env, emailBody(fmt.Sprintf("user%d@example.com", i)), "enqueue", "--key", key))
	}

	w := startWork(t, env, append(fastArgs, "--webhook-addr", "127.0.0.1:0")...)
	m := regexp.MustCompile(`webhooks=(http://127\.0\.0\.1:\d+) `).FindStringSubmatch(w.stdout.String())
	if m == nil {
		t.Fatalf("no webhooks= in the startup line %q", w.stdout.String())
	}
	hookURL := m[1] + "/webhooks/openemail"
	eventually(t, 30*time.Second, "two intents sent", func() bool {
		return count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == 2
	})
	var messageID string
	if err := pool.QueryRow(t.Context(), `SELECT message_id FROM sendonce_outbox WHERE idempotency_key = 'hook:1'`).Scan(&messageID); err != nil {
		t.Fatal(err)
	}

	post := func(secret, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, hookURL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, time.Now(), []byte(body)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bounce := fmt.Sprintf(`{"id":"evt_1","type":"email.bounced","createdAt":%q,"data":{"emailId":%q}}`,
		time.Now().UTC().Format(time.RFC3339), messageID)
	if code := post("", bounce); code != 401 {
		t.Errorf("unsigned: %d, want 401", code)
	}
	if code := post("whsec_wrong", bounce); code != 401 {
		t.Errorf("wrong secret: %d, want 401", code)
	}
	if code, _, _ := httpGet(t, hookURL); code != 405 {
		t.Errorf("GET: %d, want 405", code)
	}
	if code, _, _ := httpGet(t, m[1]+"/metrics"); code != 404 {
		t.Errorf("/metrics on the webhook listener: %d, want 404", code)
	}
	if code := post(testWebhookSecret, bounce); code != 200 {
		t.Fatalf("signed bounce: %d, want 200", code)
	}
	if code := post("whsec_LEAKCHECK_old", strings.Replace(bounce, "evt_1", "evt_2", 1)); code != 200 {
		t.Fatalf("signed with the previous secret: %d, want 200", code)
	}

	r := sendonce(t, env, "", "show", "hook:1")
	wantOK(t, r)
	if !regexp.MustCompile(`(?m)^delivery:\s+bounced \(`).MatchString(r.stdout) {
		t.Errorf("show: no delivery line: %q", r.stdout)
	}
	r = sendonce(t, env, "", "show", "hook:2")
	if !strings.Contains(r.stdout, "unknown (no delivery event yet)") {
		t.Errorf("show of an intent without events: %q", r.stdout)
	}
	r = sendonce(t, env, "", "list", "--delivery", "bounced", "--json")
	wantOK(t, r)
	var recs []*outbox.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 || recs[0].Key != "hook:1" ||
		recs[0].DeliveryStatus != outbox.DeliveryBounced {
		t.Errorf("list --delivery bounced: %v %s", err, r.stdout)
	}
	r = sendonce(t, env, "", "list", "--delivery", "bounced")
	if !regexp.MustCompile(`hook:1 .* bounced`).MatchString(r.stdout) || strings.Contains(r.stdout, "hook:2") {
		t.Errorf("list --delivery bounced: %q", r.stdout)
	}
	if r := sendonce(t, env, "", "list", "--delivery", "delivered"); r.stdout != "no intents\n" {
		t.Errorf("list --delivery delivered: %q", r.stdout)
	}
	wantError(t, sendonce(t, env, "", "list", "--delivery", "lost"), 2, "--delivery", "lost")
	r = sendonce(t, env, "", "status")
	if !regexp.MustCompile(`(?m)^delivery bounced\s+1$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^delivery delivered\s+0$`).MatchString(r.stdout) {
		t.Errorf("status: %q", r.stdout)
	}
	r = sendonce(t, env, "", "status", "--json")
	var st statusOutput
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Deliveries[outbox.DeliveryBounced] != 1 {
		t.Errorf("status --json: %v %s", err, r.stdout)
	}

	res := w.stop()
	if res.code != 0 {
		t.Fatalf("work: %s", res)
	}
	if !strings.Contains(res.stderr, "webhook refused") || !strings.Contains(res.stderr, "webhook event") {
		t.Errorf("work's log does not tell of the webhooks: %s", res.stderr)
	}
}
