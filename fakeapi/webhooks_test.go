package fakeapi_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

const hookSecret = "whsec_fake_3b1f9e"

// hook is one webhook POST as the receiver saw it.
type hook struct {
	header http.Header
	body   []byte
	event  struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		CreatedAt string `json:"createdAt"`
		Data      struct {
			EmailID string   `json:"emailId"`
			To      []string `json:"to"`
		} `json:"data"`
	}
	verifyErr error // what a verifier with hookSecret and a 300 s tolerance says
}

// receiver is a webhook endpoint that records what it gets and answers the
// statuses it was given, then 200.
type receiver struct {
	mu      sync.Mutex
	got     []hook
	answers []int
	url     string
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	rc := &receiver{answers: answers}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := hook{header: r.Header.Clone(), body: body}
		h.verifyErr = verifyHook(hookSecret, r.Header.Get("X-OpenEmail-Signature"), body, time.Now(), 300*time.Second)
		if err := json.Unmarshal(body, &h.event); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		rc.mu.Lock()
		rc.got = append(rc.got, h)
		status := http.StatusOK
		if len(rc.answers) > 0 {
			status, rc.answers = rc.answers[0], rc.answers[1:]
		}
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/hooks/openemail"
	return rc
}

func (rc *receiver) hooks() []hook {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hook(nil), rc.got...)
}

// verifyHook is the receiver's own check, written from openemail-api.md §2.4:
// pairs split at ',' and the first '=', the last t, every non-empty v1,
// freshness before the HMAC, HMAC-SHA256 over "<t>.<body>" in lowercase hex.
func verifyHook(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, pair := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(pair, "=")
		switch strings.TrimSpace(k) {
		case "t":
			ts = strings.TrimSpace(v)
		case "v1":
			if v = strings.TrimSpace(v); v != "" {
				sigs = append(sigs, v)
			}
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("malformed")
	}
	if d := now.Sub(time.Unix(t, 0)); tolerance > 0 && (d > tolerance || d < -tolerance) {
		return errors.New("stale")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", t, body)
	want := hex.EncodeToString(mac.Sum(nil))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("bad signature")
}

func hookConfig(rc *receiver, rules string) fakeapi.Config {
	faults, err := fakeapi.ParseFaults(rules)
	if err != nil {
		panic(err)
	}
	return fakeapi.Config{WebhookURL: rc.url, WebhookSecret: hookSecret, Faults: faults}
}

// sendEmail sends one email to addr and returns its id.
func sendEmail(t *testing.T, base, to string, h http.Header) string {
	t.Helper()
	r := do(t, base, "POST", "/emails", email(to), h)
	wantStatus(t, r, http.StatusOK)
	return r.body["id"].(string)
}

// sendHooked starts a fake that sends webhooks under rules to a receiver
// of the test's own, sends one email to each of to, and waits for n
// webhooks. It returns the fake, the receiver and the emails' ids, in the
// order of to.
func sendHooked(t *testing.T, rules string, n int, to ...string) (*fakeapi.Server, *receiver, []string) {
	t.Helper()
	rc := newReceiver(t)
	srv, base := startTest(t, hookConfig(rc, rules))
	ids := make([]string, len(to))
	for i, addr := range to {
		ids[i] = sendEmail(t, base, addr, nil)
	}
	if err := srv.WaitWebhooks(waitCtx(t), n); err != nil {
		t.Fatal(err)
	}
	return srv, rc, ids
}

// byEmail indexes hooks by data.emailId.
func byEmail(hooks []hook) map[string][]hook {
	out := map[string][]hook{}
	for _, h := range hooks {
		out[h.event.Data.EmailID] = append(out[h.event.Data.EmailID], h)
	}
	return out
}

func TestWebhookDeliveredForEachBatchEmail(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	srv, base := startTest(t, hookConfig(rc, ""))
	r := do(t, base, "POST", "/emails/batch", map[string]any{"emails": []any{
		email("ann@example.com"), email("bob@example.com"), email("cy@example.com"),
	}}, headers("Idempotency-Key", "batch-1"))
	wantStatus(t, r, http.StatusOK)
	if err := srv.WaitWebhooks(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	hooks := rc.hooks()
	if len(hooks) != 3 || srv.WebhooksSent() != 3 || len(srv.Webhooks()) != 3 {
		t.Fatalf("%d hooks received, %d sent, %d attempts; want 3 each", len(hooks), srv.WebhooksSent(), len(srv.Webhooks()))
	}
	seen := map[string]bool{}
	for i, item := range r.body["data"].([]any) {
		id := item.(map[string]any)["id"].(string)
		to := item.(map[string]any)["to"].([]any)[0].(string)
		h := hooks[i]
		if h.verifyErr != nil {
			t.Errorf("hook %d: %v", i, h.verifyErr)
		}
		if h.event.Data.EmailID != id || len(h.event.Data.To) != 1 || h.event.Data.To[0] != to {
			t.Errorf("hook %d is for %s %v, want %s %s", i, h.event.Data.EmailID, h.event.Data.To, id, to)
		}
		if h.event.Type != "email.delivered" || h.header.Get("X-OpenEmail-Event") != "email.delivered" {
			t.Errorf("hook %d type %q, X-OpenEmail-Event %q", i, h.event.Type, h.header.Get("X-OpenEmail-Event"))
		}
		if ct := h.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if _, err := time.Parse(time.RFC3339, h.event.CreatedAt); err != nil {
			t.Errorf("createdAt %q: %v", h.event.CreatedAt, err)
		}
		del := h.header.Get("X-OpenEmail-Delivery")
		if !strings.HasPrefix(h.event.ID, "evt_") || !strings.HasPrefix(del, "whd_") || seen[h.event.ID] || seen[del] {
			t.Errorf("hook %d: event id %q, delivery id %q: want fresh evt_… and whd_…", i, h.event.ID, del)
		}
		seen[h.event.ID], seen[del] = true, true
	}
}

func TestWebhookBounceAndComplainRules(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	srv, base := startTest(t, hookConfig(rc, "bounce;to=bounced@,complain:to=angry@"))
	ok := sendEmail(t, base, "ok@example.com", nil)
	bounced := sendEmail(t, base, "bounced@example.com", nil)
	angry := sendEmail(t, base, "angry@example.com", nil)
	delayed := sendEmail(t, base, "slow@example.com", headers("X-Fake-Fault", "delay_then_bounce"))
	if err := srv.WaitWebhooks(waitCtx(t), 5); err != nil {
		t.Fatal(err)
	}
	got := byEmail(rc.hooks())
	for id, want := range map[string][]string{
		ok:      {"email.delivered"},
		bounced: {"email.bounced"},
		angry:   {"email.complained"},
		delayed: {"email.delivery_delayed", "email.bounced"},
	} {
		var types []string
		for _, h := range got[id] {
			types = append(types, h.event.Type)
			if h.verifyErr != nil || h.header.Get("X-OpenEmail-Event") != h.event.Type {
				t.Errorf("%s: %v, X-OpenEmail-Event %q", h.event.Type, h.verifyErr, h.header.Get("X-OpenEmail-Event"))
			}
		}
		if strings.Join(types, " ") != strings.Join(want, " ") {
			t.Errorf("email %s: events %v, want %v", id, types, want)
		}
	}
	if len(srv.DeliveriesTo("bounced@example.com")) != 1 {
		t.Error("a bounced email is still delivered by the API and in the ledger")
	}
}

func TestWebhookBounceTimesAndNoURL(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	srv, base := startTest(t, hookConfig(rc, "bounce;times=1"))
	r := do(t, base, "POST", "/emails/batch", map[string]any{"emails": []any{
		email("a@example.com"), email("b@example.com"),
	}}, headers("Idempotency-Key", "b-times"))
	wantStatus(t, r, http.StatusOK)
	if err := srv.WaitWebhooks(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if hooks := rc.hooks(); hooks[0].event.Type != "email.bounced" || hooks[1].event.Type != "email.delivered" {
		t.Errorf("types %s, %s: want the first email bounced only", hooks[0].event.Type, hooks[1].event.Type)
	}

	// Without a webhook URL nothing is sent and event rules do nothing.
	plain, base2 := startTest(t, fakeapi.Config{Faults: []fakeapi.Fault{{Kind: fakeapi.FaultBounce}}})
	sendEmail(t, base2, "a@example.com", nil)
	if plain.WebhooksSent() != 0 || len(plain.Webhooks()) != 0 {
		t.Error("webhooks sent without a URL")
	}
}

func TestWebhookDuplicateKeepsDeliveryID(t *testing.T) {
	t.Parallel()
	srv, rc, ids := sendHooked(t, "webhook_duplicate;to=dup@", 1, "dup@example.com")
	dup := ids[0]
	hooks := rc.hooks()
	if len(hooks) != 2 {
		t.Fatalf("%d hooks, want the event twice", len(hooks))
	}
	for _, h := range hooks {
		if h.verifyErr != nil || h.event.Data.EmailID != dup {
			t.Errorf("hook %+v: %v", h.event, h.verifyErr)
		}
	}
	if hooks[0].event.ID != hooks[1].event.ID ||
		hooks[0].header.Get("X-OpenEmail-Delivery") != hooks[1].header.Get("X-OpenEmail-Delivery") {
		t.Errorf("copies differ: %s/%s, %s/%s", hooks[0].event.ID, hooks[0].header.Get("X-OpenEmail-Delivery"),
			hooks[1].event.ID, hooks[1].header.Get("X-OpenEmail-Delivery"))
	}
	att := srv.Webhooks()
	if len(att) != 2 || att[0].Copy != 1 || att[1].Copy != 2 || att[1].Fault != "webhook_duplicate;to=dup@" {
		t.Errorf("attempts %+v", att)
	}
}

func TestWebhookOutOfOrderAndDelay(t *testing.T) {
	t.Parallel()
	_, rc, ids := sendHooked(t, "webhook_out_of_order;to=first@,webhook_delay=300ms;to=slow@", 4,
		"first@example.com", "second@example.com", "slow@example.com", "fast@example.com")
	first, second, slow, fast := ids[0], ids[1], ids[2], ids[3]
	pos := map[string]int{}
	for i, h := range rc.hooks() {
		pos[h.event.Data.EmailID] = i
		if h.verifyErr != nil {
			t.Error(h.verifyErr)
		}
	}
	if pos[first] < pos[second] {
		t.Errorf("out-of-order event arrived at %d, before the later one at %d", pos[first], pos[second])
	}
	if pos[slow] < pos[fast] {
		t.Errorf("delayed event arrived at %d, before the later one at %d", pos[slow], pos[fast])
	}
}

func TestWebhookBadSignatureAndStale(t *testing.T) {
	t.Parallel()
	_, rc, ids := sendHooked(t, "webhook_bad_signature;to=bad@,webhook_stale;to=stale@", 3,
		"good@example.com", "bad@example.com", "stale@example.com")
	good, bad, stale := ids[0], ids[1], ids[2]
	got := byEmail(rc.hooks())
	if err := got[good][0].verifyErr; err != nil {
		t.Errorf("good: %v", err)
	}
	if err := got[bad][0].verifyErr; err == nil || err.Error() != "bad signature" {
		t.Errorf("bad signature: verifier says %v", err)
	}
	h := got[stale][0]
	if err := h.verifyErr; err == nil || err.Error() != "stale" {
		t.Errorf("stale: verifier says %v", err)
	}
	// Stale, but signed with the right secret: the HMAC holds for its t.
	if err := verifyHook(hookSecret, h.header.Get("X-OpenEmail-Signature"), h.body, time.Now(), 0); err != nil {
		t.Errorf("stale event's HMAC: %v", err)
	}
	ts, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(h.header.Get("X-OpenEmail-Signature"), ",")[0], "t="), 10, 64)
	if age := time.Since(time.Unix(ts, 0)); age < 300*time.Second || age > 310*time.Second {
		t.Errorf("stale t is %v old, want about 301 s", age)
	}
	// The fake's own signer agrees with the receiver's check.
	if err := verifyHook(hookSecret, fakeapi.SignWebhook(hookSecret, time.Now().Unix(), []byte(`{"id":"x"}`)),
		[]byte(`{"id":"x"}`), time.Now(), 300*time.Second); err != nil {
		t.Errorf("SignWebhook: %v", err)
	}
}

func TestWebhookRetriesAfter500(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusInternalServerError)
	srv, base := startTest(t, hookConfig(rc, ""))
	id := sendEmail(t, base, "ann@example.com", nil)
	if err := srv.WaitWebhooks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	att := srv.Webhooks()
	if len(att) != 2 || att[0].Status != 500 || att[1].Status != 200 || att[0].Attempt != 1 || att[1].Attempt != 2 ||
		att[0].DeliveryID != att[1].DeliveryID || att[0].EventID != att[1].EventID || att[1].EmailID != id {
		t.Fatalf("attempts %+v", att)
	}
	hooks := rc.hooks()
	if len(hooks) != 2 || hooks[0].header.Get("X-OpenEmail-Delivery") != hooks[1].header.Get("X-OpenEmail-Delivery") ||
		!bytes.Equal(hooks[0].body, hooks[1].body) {
		t.Errorf("the retry is not the same delivery of the same event")
	}
}

func TestWebhookGivesUpAndCloseStopsSender(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 503, 503, 503, 503, 503, 503, 503, 503)
	srv := fakeapi.New(hookConfig(rc, ""))
	defer srv.Close()
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sendEmail(t, base, "ann@example.com", nil)
	if err := srv.WaitWebhooks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Webhooks()); n != fakeapi.WebhookAttempts {
		t.Errorf("%d attempts, want %d", n, fakeapi.WebhookAttempts)
	}
	sendEmail(t, base, "bob@example.com", nil) // retrying when Close comes
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not stop the webhook sender")
	}
}

func TestWebhookSecretIsNeverShown(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 500)
	var logs syncbuf.Buffer
	cfg := hookConfig(rc, "webhook_bad_signature;to=bad@")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, base := startTest(t, cfg)
	sendEmail(t, base, "ann@example.com", nil)
	sendEmail(t, base, "bad@example.com", nil)
	if err := srv.WaitWebhooks(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, path := range []string{"/_fake/requests", "/_fake/webhooks", "/_fake/deliveries", "/_fake/faults"} {
		seen = append(seen, string(do(t, base, "GET", path, nil, nil).raw))
	}
	reqs, _ := json.Marshal(srv.Requests())
	hooks, _ := json.Marshal(srv.Webhooks())
	seen = append(seen, logs.String(), string(reqs), string(hooks))
	for _, h := range rc.hooks() {
		seen = append(seen, fmt.Sprint(h.header), string(h.body))
	}
	for _, s := range seen {
		if strings.Contains(s, hookSecret) {
			t.Errorf("the webhook secret shows in %s", s)
		}
	}
	if !strings.Contains(logs.String(), "webhook") {
		t.Errorf("no webhook lines logged: %s", logs.String())
	}
	if err := (fakeapi.Config{WebhookURL: rc.url}).Check(); err == nil {
		t.Error("a webhook URL without a secret is accepted")
	}
	if err := (fakeapi.Config{WebhookURL: "ftp://x", WebhookSecret: hookSecret}).Check(); err == nil ||
		strings.Contains(err.Error(), hookSecret) {
		t.Errorf("bad URL: %v", err)
	}
}

func TestParseWebhookFaults(t *testing.T) {
	t.Parallel()
	for rule, want := range map[string]string{
		"bounce;to=bounced@":                 "bounce;to=bounced@",
		"complain:p=0.5:times=2":             "complain;times=2;p=0.5",
		"delay_then_bounce;key=inv:":         "delay_then_bounce;key=inv:",
		"webhook_duplicate":                  "webhook_duplicate",
		"webhook_out_of_order":               "webhook_out_of_order",
		"webhook_out_of_order=3;to=a@":       "webhook_out_of_order=3;to=a@",
		"webhook_delay=2s:p=0.1":             "webhook_delay=2s;p=0.1",
		"webhook_bad_signature;to=x@":        "webhook_bad_signature;to=x@",
		"webhook_stale;times=1":              "webhook_stale;times=1",
		"webhook_out_of_order=1;key=k:1:p=1": "webhook_out_of_order;key=k:1",
	} {
		f, err := fakeapi.ParseFault(rule)
		if err != nil {
			t.Errorf("%s: %v", rule, err)
			continue
		}
		if f.String() != want {
			t.Errorf("%s: String %q, want %q", rule, f.String(), want)
		}
		if back, err := fakeapi.ParseFault(f.String()); err != nil || back != f {
			t.Errorf("%s: round trip %+v, %v", rule, back, err)
		}
	}
	for _, bad := range []string{
		"bounce=x", "webhook_delay", "webhook_delay=-1s", "webhook_out_of_order=-1", "webhook_out_of_order=x",
		"bounce;path=/emails", "webhook_stale;method=POST", "complain;status=500", "webhook_duplicate=2",
	} {
		if _, err := fakeapi.ParseFault(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
