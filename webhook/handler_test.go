package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	secret    = "whsec_SECRETMARKER_current"
	oldSecret = "whsec_SECRETMARKER_previous"
)

// env is a handler over a fresh database, with its log captured.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	ob   *outbox.Outbox
	h    *webhook.Handler
	log  *syncbuf.Buffer
	out  strings.Builder // every response body
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, ob := outboxtest.New(t)
	e := &env{t: t, pool: pool, ob: ob, log: &syncbuf.Buffer{}}
	h, err := webhook.New(pool, []string{secret, oldSecret}, slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	t.Cleanup(func() {
		for _, s := range []string{"SECRETMARKER", "v1="} {
			if strings.Contains(e.log.String(), s) || strings.Contains(e.out.String(), s) {
				t.Errorf("%q in the log or a response:\nlog: %s\nresponses: %s", s, e.log, e.out.String())
			}
		}
	})
	return e
}

// do sends a request to the handler and returns its status.
func (e *env) do(method string, header http.Header, body []byte) int {
	e.t.Helper()
	req := httptest.NewRequest(method, "/webhooks/openemail", bytes.NewReader(body))
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	e.out.WriteString(rec.Body.String())
	return rec.Code
}

// post sends body signed with secret now, with a delivery id header when
// delivery is not empty.
func (e *env) post(body, delivery string) int {
	e.t.Helper()
	h := http.Header{}
	h.Set(webhook.SignatureHeader, webhook.Sign(secret, time.Now(), []byte(body)))
	if delivery != "" {
		h.Set(webhook.DeliveryHeader, delivery)
	}
	return e.do(http.MethodPost, h, []byte(body))
}

func (e *env) events() int {
	return outboxtest.Value[int](e.t, e.pool, `SELECT count(*) FROM sendonce_event`)
}

// enqueue writes an intent and returns its key.
func (e *env) enqueue(key string) {
	e.t.Helper()
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := e.ob.Enqueue(context.Background(), tx, outbox.Intent{Key: key, Payload: outboxtest.InvoiceBody})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// send records the intent as sent with message id, as the worker does,
// then matches the events that came before it, as the worker's sweeper
// does within a second.
func (e *env) send(key, messageID string) {
	e.t.Helper()
	if _, err := sendstate.MarkSent(context.Background(), e.pool, sendstate.Sent{Key: key, MessageID: messageID}); err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := sendstate.MatchEvents(context.Background(), e.pool); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) status(key string) outbox.DeliveryStatus {
	e.t.Helper()
	return outboxtest.Get(e.t, e.ob, key).DeliveryStatus
}

// evBody is an event of type about email, created at.
func evBody(id, typ, email string, at time.Time) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"createdAt":%q,"data":{"emailId":%q}}`, id, typ, at.UTC().Format(time.RFC3339Nano), email)
}

func signed(sec string, t time.Time, body string) http.Header {
	h := http.Header{}
	h.Set(webhook.SignatureHeader, webhook.Sign(sec, t, []byte(body)))
	return h
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	// The handler reads this same instant: with its own clock a second
	// boundary crossed between signing and checking turned "301 s ahead"
	// into 300 s and an accepted event.
	e.h.SetClock(func() time.Time { return now })
	body := evBody("evt_1", "email.delivered", "em_1", now)
	good := webhook.Sign(secret, now, []byte(body))
	ts := fmt.Sprint(now.Unix())
	sig := strings.TrimPrefix(good, "t="+ts+",v1=")
	hdr := func(v string) http.Header { h := http.Header{}; h.Set(webhook.SignatureHeader, v); return h }
	big := append([]byte(`{"id":"evt_big","type":"email.delivered","pad":"`), bytes.Repeat([]byte("x"), 10<<20)...)
	big = append(big, `"}`...)
	justOver := append([]byte(`{"id":"evt_big","type":"email.delivered","pad":"`), bytes.Repeat([]byte("x"), webhook.MaxBody)...)

	cases := []struct {
		name   string
		method string
		header http.Header
		body   string
		raw    []byte
		want   int
	}{
		{"GET", http.MethodGet, signed(secret, now, body), body, nil, 405},
		{"PUT", http.MethodPut, signed(secret, now, body), body, nil, 405},
		{"no header", "", http.Header{}, body, nil, 401},
		{"empty header", "", hdr("  "), body, nil, 401},
		{"no t", "", hdr("v1=" + sig), body, nil, 401},
		{"no v1", "", hdr("t=" + ts), body, nil, 401},
		{"empty v1", "", hdr("t=" + ts + ",v1="), body, nil, 401},
		{"t not a number", "", hdr("t=abc,v1=" + sig), body, nil, 401},
		{"last t not a number", "", hdr("t=" + ts + ",t=x,v1=" + sig), body, nil, 401},
		{"bad hex", "", hdr("t=" + ts + ",v1=zz" + sig[2:]), body, nil, 401},
		{"uppercase hex", "", hdr("t=" + ts + ",v1=" + strings.ToUpper(sig)), body, nil, 401},
		{"truncated signature", "", hdr("t=" + ts + ",v1=" + sig[:32]), body, nil, 401},
		{"wrong secret", "", signed("whsec_wrong", now, body), body, nil, 401},
		{"secret with a prefix stripped", "", signed(strings.TrimPrefix(secret, "whsec_"), now, body), body, nil, 401},
		{"301 s old", "", signed(secret, now.Add(-301*time.Second), body), body, nil, 401},
		{"301 s ahead", "", signed(secret, now.Add(301*time.Second), body), body, nil, 401},
		{"several t, last wrong", "", hdr("t=" + ts + ",v1=" + sig + ",t=" + fmt.Sprint(now.Unix()-1)), body, nil, 401},
		{"several t, last stale", "", hdr("t=" + ts + ",t=" + fmt.Sprint(now.Unix()-1000) + ",v1=" + sig), body, nil, 401},
		{"several v1, none right", "", hdr("t=" + ts + ",v1=" + strings.Repeat("0", 64) + ",v1=" + strings.Repeat("a", 64)), body, nil, 401},
		{"body changed", "", signed(secret, now, body), body + " ", nil, 401},
		{"body not an object", "", signed(secret, now, `["a"]`), `["a"]`, nil, 400},
		{"body null", "", signed(secret, now, `null`), `null`, nil, 400},
		{"body a string", "", signed(secret, now, `"x"`), `"x"`, nil, 400},
		{"body not JSON", "", signed(secret, now, `{"id":`), `{"id":`, nil, 400},
		{"empty body", "", signed(secret, now, ``), ``, nil, 400},
		{"no type", "", signed(secret, now, `{"id":"evt_x"}`), `{"id":"evt_x"}`, nil, 400},
		{"no id", "", signed(secret, now, `{"type":"email.delivered"}`), `{"type":"email.delivered"}`, nil, 400},
		{"type not a string", "", signed(secret, now, `{"id":"e","type":7}`), `{"id":"e","type":7}`, nil, 400},
		{"id empty", "", signed(secret, now, `{"id":"","type":"email.sent"}`), `{"id":"","type":"email.sent"}`, nil, 400},
		{"NUL in a string", "", signed(secret, now, `{"id":"e_nul","type":"email.sent","x":"\u0000"}`), `{"id":"e_nul","type":"email.sent","x":"\u0000"}`, nil, 400},
		{"10 MiB body", "", signed(secret, now, string(big)), "", big, 413},
		{"1 MiB + 1 body", "", signed(secret, now, string(justOver)), "", justOver, 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = http.MethodPost
			}
			raw := c.raw
			if raw == nil {
				raw = []byte(c.body)
			}
			if got := e.do(method, c.header, raw); got != c.want {
				t.Errorf("status %d, want %d", got, c.want)
			}
			if n := e.events(); n != 0 {
				t.Errorf("%d events stored, want none", n)
			}
		})
	}
}

func TestAccepts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	e.h.SetClock(func() time.Time { return now })
	accept := func(name string, h http.Header, body string) {
		t.Helper()
		before := e.events()
		if got := e.do(http.MethodPost, h, []byte(body)); got != 200 {
			t.Errorf("%s: status %d, want 200", name, got)
		}
		if n := e.events(); n != before+1 {
			t.Errorf("%s: %d events, want %d", name, n, before+1)
		}
	}
	b := func(id string) string { return evBody(id, "email.delivered", "em_"+id, now) }
	sigOf := func(sec, body string, at time.Time) string {
		return strings.SplitN(webhook.Sign(sec, at, []byte(body)), ",v1=", 2)[1]
	}
	hdr := func(v string) http.Header { h := http.Header{}; h.Set(webhook.SignatureHeader, v); return h }

	accept("plain", signed(secret, now, b("a1")), b("a1"))
	accept("the previous secret", signed(oldSecret, now, b("a2")), b("a2"))
	accept("300 s old", signed(secret, now.Add(-299*time.Second), b("a3")), b("a3"))
	accept("several t, the last wins", hdr(fmt.Sprintf("t=%d,v1=%s,t=%d", now.Unix()-5000, sigOf(secret, b("a4"), now), now.Unix())), b("a4"))
	accept("several v1, one right", hdr(fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), strings.Repeat("0", 64), sigOf(secret, b("a5"), now))), b("a5"))
	accept("spaces and leading zeros", hdr(fmt.Sprintf(" t = 0%d , v1 = %s ", now.Unix(), sigOf(secret, b("a6"), now))), b("a6"))
	accept("unknown event type", signed(secret, now, `{"id":"a7","type":"form.submitted","data":{"formId":"f1"}}`), `{"id":"a7","type":"form.submitted","data":{"formId":"f1"}}`)
	accept("exactly 1 MiB", signed(secret, now, padded("a8", webhook.MaxBody)), padded("a8", webhook.MaxBody))
}

// padded is an event of exactly n bytes.
func padded(id string, n int) string {
	head := fmt.Sprintf(`{"id":%q,"type":"email.opened","pad":"`, id)
	return head + strings.Repeat("x", n-len(head)-2) + `"}`
}

func TestStoredFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		body, delivery, wantDelivery, wantEmail string
		wantAt                                  bool
	}{
		{`{"id":"e1","type":"email.sent","createdAt":"2026-12-01T08:00:00Z","data":{"emailId":"m1","id":"x"}}`, "dlv_1", "dlv_1", "m1", true},
		{`{"id":"e2","type":"email.sent","created_at":"2026-12-01T08:00:00Z","data":{"email_id":"m2"}}`, "", "e2", "m2", true},
		{`{"id":"e3","type":"email.sent","createdAt":"yesterday","data":{"id":"m3"}}`, "", "e3", "m3", false},
		{`{"id":"e4","type":"domain.verified","data":{"domain":"example.com"}}`, "", "e4", "", false},
	}
	for _, c := range cases {
		if got := e.post(c.body, c.delivery); got != 200 {
			t.Fatalf("%s: %d", c.body, got)
		}
		var email *string
		var occurred, received time.Time
		if err := e.pool.QueryRow(context.Background(), `SELECT email_id, occurred_at, received_at FROM sendonce_event WHERE delivery_id = $1`,
			c.wantDelivery).Scan(&email, &occurred, &received); err != nil {
			t.Fatalf("%s: %v", c.wantDelivery, err)
		}
		if got := deref(email); got != c.wantEmail {
			t.Errorf("%s: email_id %q, want %q", c.wantDelivery, got, c.wantEmail)
		}
		if c.wantAt && !occurred.Equal(at) || !c.wantAt && !occurred.Equal(received) {
			t.Errorf("%s: occurred_at %s (received %s)", c.wantDelivery, occurred, received)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestDuplicateStoredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("invoice:1")
	e.send("invoice:1", "em_1")
	body := evBody("evt_1", "email.delivered", "em_1", time.Now())
	for range 3 {
		if got := e.post(body, "dlv_1"); got != 200 {
			t.Fatalf("status %d", got)
		}
	}
	if n := e.events(); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	// The same event id under another delivery id, or none, is the same
	// event: the header is not signed (TestReplayUnderAnotherDeliveryID).
	for _, delivery := range []string{"dlv_2", ""} {
		if got := e.post(body, delivery); got != 200 {
			t.Fatalf("status %d", got)
		}
	}
	if n := e.events(); n != 1 {
		t.Fatalf("%d events, want 1 (evt_1)", n)
	}
	rec := outboxtest.Get(t, e.ob, "invoice:1")
	if rec.DeliveryStatus != outbox.DeliveryDelivered || rec.DeliveryStatusAt == nil {
		t.Fatalf("delivery %q at %v", rec.DeliveryStatus, rec.DeliveryStatusAt)
	}
}

func TestUnmatchedThenSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("invoice:late")
	now := time.Now()
	if got := e.post(evBody("e1", "email.delivered", "em_late", now), ""); got != 200 {
		t.Fatalf("status %d", got)
	}
	if got := e.post(evBody("e2", "email.opened", "em_late", now.Add(time.Second)), ""); got != 200 {
		t.Fatalf("status %d", got)
	}
	if n := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM sendonce_event WHERE intent_id IS NULL`); n != 2 {
		t.Fatalf("%d unmatched events, want 2", n)
	}
	if s := e.status("invoice:late"); s != "" {
		t.Fatalf("delivery %q before the send was recorded", s)
	}
	e.send("invoice:late", "em_late")
	rec := outboxtest.Get(t, e.ob, "invoice:late")
	if rec.DeliveryStatus != outbox.DeliveryDelivered {
		t.Fatalf("delivery %q after the send, want delivered", rec.DeliveryStatus)
	}
	if n := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM sendonce_event WHERE intent_id = $1`, rec.ID); n != 2 {
		t.Fatalf("%d events matched to the intent, want 2", n)
	}
	// An event for a message no intent has stays unmatched.
	if got := e.post(evBody("e3", "email.bounced", "em_other", now), ""); got != 200 {
		t.Fatalf("status %d", got)
	}
	if n := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM sendonce_event WHERE intent_id IS NULL`); n != 1 {
		t.Fatalf("%d unmatched events, want 1", n)
	}
}

func TestOutOfOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("invoice:1")
	e.send("invoice:1", "em_1")
	t0 := time.Now()
	e.post(evBody("e2", "email.bounced", "em_1", t0.Add(time.Second)), "")
	e.post(evBody("e1", "email.delivery_delayed", "em_1", t0), "")
	if s := e.status("invoice:1"); s != outbox.DeliveryBounced {
		t.Fatalf("delivery %q, want bounced", s)
	}
}

// step is an event in a precedence case: its type and its time in seconds.
type step struct {
	typ string
	at  int
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps []step
		want  outbox.DeliveryStatus
	}{
		{"delayed", []step{{"email.delivery_delayed", 0}}, outbox.DeliveryDelayed},
		{"delayed then delivered", []step{{"email.delivery_delayed", 0}, {"email.delivered", 1}}, outbox.DeliveryDelivered},
		{"delivered then a late delay", []step{{"email.delivered", 0}, {"email.delivery_delayed", 1}}, outbox.DeliveryDelivered},
		{"bounced, then delivered later", []step{{"email.bounced", 0}, {"email.delivered", 5}}, outbox.DeliveryBounced},
		{"bounced, then delayed later", []step{{"email.bounced", 0}, {"email.delivery_delayed", 5}}, outbox.DeliveryBounced},
		{"delivered, then complained", []step{{"email.delivered", 0}, {"email.complained", 5}}, outbox.DeliveryComplained},
		{"bounced, then complained", []step{{"email.bounced", 0}, {"email.complained", 5}}, outbox.DeliveryComplained},
		{"complained, then bounced later", []step{{"email.complained", 0}, {"email.bounced", 5}}, outbox.DeliveryComplained},
		{"failed, then bounced later", []step{{"email.failed", 0}, {"email.bounced", 5}}, outbox.DeliveryBounced},
		{"bounced, then failed later", []step{{"email.bounced", 0}, {"email.failed", 5}}, outbox.DeliveryFailed},
		{"suppressed", []step{{"email.delivery_delayed", 0}, {"email.suppressed", 1}}, outbox.DeliverySuppressed},
		{"others change nothing", []step{{"email.delivered", 0}, {"email.opened", 5}, {"email.clicked", 6}, {"email.sent", 7}}, outbox.DeliveryDelivered},
		{"only others", []step{{"email.sent", 0}, {"email.opened", 1}}, ""},
		{"everything", []step{{"email.delivery_delayed", 0}, {"email.delivered", 1}, {"email.bounced", 2}, {"email.complained", 3}, {"email.delivery_delayed", 4}}, outbox.DeliveryComplained},
	}
	e := newEnv(t)
	t0 := time.Now().Truncate(time.Second)
	n := 0
	for _, c := range cases {
		// Every order of arrival, and events before and after the send is
		// recorded, give the same status.
		for i, order := range permutations(len(c.steps)) {
			for _, sentFirst := range []bool{true, false} {
				n++
				key, email := fmt.Sprintf("p:%d", n), fmt.Sprintf("em_p%d", n)
				e.enqueue(key)
				if sentFirst {
					e.send(key, email)
				}
				for _, j := range order {
					s := c.steps[j]
					if got := e.post(evBody(fmt.Sprintf("e%d_%d", n, j), s.typ, email, t0.Add(time.Duration(s.at)*time.Second)), ""); got != 200 {
						t.Fatalf("%s: status %d", c.name, got)
					}
				}
				if !sentFirst {
					e.send(key, email)
				}
				if got := e.status(key); got != c.want {
					t.Errorf("%s (order %d, sent first %v): delivery %q, want %q", c.name, i, sentFirst, got, c.want)
				}
			}
		}
	}
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// An event racing the record of its send is matched, whichever commits
// first: at once, or by the sweeper's next match of pending events.
func TestRaceWithSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 40
	for i := range n {
		e.enqueue(fmt.Sprintf("r:%d", i))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if _, err := sendstate.MarkSent(context.Background(), e.pool, sendstate.Sent{Key: fmt.Sprintf("r:%d", i), MessageID: fmt.Sprintf("em_r%d", i)}); err != nil {
				t.Error(err)
			}
		}
	}()
	for i := range n {
		e.post(evBody(fmt.Sprintf("er%d", i), "email.delivered", fmt.Sprintf("em_r%d", i), time.Now()), "")
	}
	<-done
	// What raced is matched by the sweeper's next pass.
	if _, _, err := sendstate.MatchEvents(context.Background(), e.pool); err != nil {
		t.Fatal(err)
	}
	if got := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM sendonce_outbox WHERE delivery_status = 'delivered'`); got != n {
		t.Fatalf("%d of %d intents delivered", got, n)
	}
}

func TestNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN sendonce_delivery"); err != nil {
		t.Fatal(err)
	}
	e.enqueue("invoice:n")
	e.send("invoice:n", "em_n")
	t0 := time.Now()
	e.post(evBody("n1", "email.delivered", "em_n", t0), "")
	e.post(evBody("n2", "email.delivery_delayed", "em_n", t0.Add(-time.Second)), "") // no change, no notification
	e.post(evBody("n3", "email.complained", "em_n", t0.Add(time.Second)), "")
	for _, want := range []string{`{"key" : "invoice:n", "status" : "delivered"}`, `{"key" : "invoice:n", "status" : "complained"}`} {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload != want {
			t.Errorf("payload %s, want %s", n.Payload, want)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if n, err := conn.Conn().WaitForNotification(short); err == nil {
		t.Errorf("unexpected notification %s", n.Payload)
	}
}

func TestVerifyBoundaries(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"e","type":"email.sent"}`)
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		at   time.Time
		want error
	}{
		{now.Add(-300 * time.Second), nil},
		{now.Add(300 * time.Second), nil},
		{now.Add(-301 * time.Second), webhook.ErrStale},
		{now.Add(301 * time.Second), webhook.ErrStale},
	} {
		if err := webhook.Verify([]string{secret}, webhook.Sign(secret, c.at, body), body, now); err != c.want {
			t.Errorf("signed at %s: %v, want %v", c.at.Sub(now), err, c.want)
		}
	}
	// Freshness is checked before the signature.
	if err := webhook.Verify([]string{"other"}, webhook.Sign(secret, now.Add(-time.Hour), body), body, now); err != webhook.ErrStale {
		t.Errorf("stale and wrong: %v, want ErrStale", err)
	}
	if err := webhook.Verify([]string{" "}, webhook.Sign(secret, now, body), body, now); err != webhook.ErrNoSecret {
		t.Errorf("blank secret: %v", err)
	}
	if _, err := webhook.New(nil, nil, nil); err == nil {
		t.Error("New with no pool and no secret: no error")
	}
}

// TestLogNamesTheIntent: the "webhook event" line names the intent the
// event matched by its key and id (it printed the id's pointer,
// intent_id=0x3af36c622470), and an unmatched event's line names none.
func TestLogNamesTheIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("invoice:logged")
	e.send("invoice:logged", "m-logged")
	id := outboxtest.Get(t, e.ob, "invoice:logged").ID
	now := time.Now()
	if got := e.post(evBody("e-logged", "email.delivered", "m-logged", now), ""); got != 200 {
		t.Fatalf("matched event: %d", got)
	}
	if got := e.post(evBody("e-stray", "email.delivered", "m-unknown", now), ""); got != 200 {
		t.Fatalf("unmatched event: %d", got)
	}
	var matched, stray string
	for _, line := range strings.Split(e.log.String(), "\n") {
		switch {
		case strings.Contains(line, "event_id=e-logged"):
			matched = line
		case strings.Contains(line, "event_id=e-stray"):
			stray = line
		}
	}
	if want := fmt.Sprintf("key=invoice:logged intent_id=%d ", id); !strings.Contains(matched, want) {
		t.Errorf("matched event's line %q, want %q in it", matched, want)
	}
	if stray == "" || strings.Contains(stray, "intent_id") || strings.Contains(stray, "key=") {
		t.Errorf("unmatched event's line %q, want no intent named", stray)
	}
}
