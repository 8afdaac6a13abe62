package outboxui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestCSRF: a POST without the page's form token, or with a wrong one, or
// from another site, changes nothing; the page's own form works.
func TestCSRF(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true})
	h.enqueue(outbox.Intent{Key: "invoice:csrf", Payload: email("ada@example.com", "Invoice")})
	h.fail("invoice:csrf", "422 invalid_request_error: bad address", false, time.Minute)
	jobs := h.jobs()
	token := h.csrf("retry", "invoice:csrf")

	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{"key": {"invoice:csrf"}}, nil},
		{"empty token", url.Values{"key": {"invoice:csrf"}, "csrf": {""}}, nil},
		{"wrong token", url.Values{"key": {"invoice:csrf"}, "csrf": {token + "x"}}, nil},
		{"from another site", url.Values{"key": {"invoice:csrf"}, "csrf": {token}},
			[]string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
	} {
		code, body := h.do("POST", "/outbox/retry", tc.form, tc.header...)
		if code != http.StatusForbidden {
			t.Errorf("%s: POST /outbox/retry: %d, want 403\n%.300s", tc.name, code, body)
		}
		if rec := h.get("invoice:csrf"); rec.State != outbox.StateFailed {
			t.Fatalf("%s: the intent is %s, want it left failed", tc.name, rec.State)
		}
		if n := h.jobs(); n != jobs {
			t.Fatalf("%s: %d River jobs, want %d: a job was inserted", tc.name, n, jobs)
		}
	}
	if code, body := h.do("POST", "/outbox/cancel", url.Values{"key": {"invoice:csrf"}}); code != 403 || !strings.Contains(body, "form token") {
		t.Errorf("cancel without a token: %d %.300s", code, body)
	}

	// The page's own form, same origin, goes through.
	code, body := h.do("POST", "/outbox/retry", url.Values{"key": {"invoice:csrf"}, "csrf": {token}},
		"Sec-Fetch-Site", "same-origin", "Origin", h.srv.URL)
	if code != http.StatusSeeOther || !strings.Contains(body, "done=retried") {
		t.Fatalf("POST with the token: %d %.300s", code, body)
	}
	if rec := h.get("invoice:csrf"); rec.State != outbox.StatePending {
		t.Errorf("after the retry the intent is %s, want pending", rec.State)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "outbox page: retried") || !strings.Contains(logs, "key=invoice:csrf") ||
		!strings.Contains(logs, `who="anyone on loopback`) {
		t.Errorf("the retry was not logged with who:\n%s", logs)
	}
}

// TestReadOnly: without --ui-actions the page offers no action and refuses
// every POST.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	h.enqueue(outbox.Intent{Key: "invoice:ro", Payload: email("ada@example.com", "Invoice")},
		outbox.Intent{Key: "invoice:ro-later", Payload: email("ada@example.com", "Later"), SendAt: time.Now().Add(time.Hour)})
	h.fail("invoice:ro", "422 invalid_request_error: bad address", false, time.Minute)
	code, body := h.do("GET", "/outbox/intent?key=invoice:ro", nil)
	if code != 200 || strings.Contains(body, `id="retry"`) || !strings.Contains(body, "read-only") {
		t.Errorf("intent page, read-only: %d, retry offered or no read-only mark:\n%.2000s", code, body)
	}
	for _, path := range []string{"/outbox/retry?key=invoice:ro", "/outbox/cancel?key=invoice:ro-later"} {
		if code, body := h.do("GET", path, nil); code != 403 || !strings.Contains(body, "--ui-actions") {
			t.Errorf("GET %s: %d %.300s", path, code, body)
		}
	}
	for _, action := range []string{"retry", "cancel"} {
		code, body := h.do("POST", "/outbox/"+action, url.Values{"key": {"invoice:ro", "invoice:ro-later"}, "csrf": {"anything"}})
		if code != 403 || !strings.Contains(body, "--ui-actions") {
			t.Errorf("POST %s read-only: %d %.300s", action, code, body)
		}
	}
	if a, b := h.get("invoice:ro"), h.get("invoice:ro-later"); a.State != outbox.StateFailed || b.State != outbox.StatePending {
		t.Errorf("read-only page changed intents: %s, %s", a.State, b.State)
	}
}

// TestTokenOffLoopback: with a UI token (required off loopback) the page
// refuses a request without a valid token, as the River UI does, and logs
// who acted by the token's name, never its secret.
func TestTokenOffLoopback(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true, token: "alice:s3cret-a,bob:s3cret-b"})
	h.enqueue(outbox.Intent{Key: "welcome:1", Payload: email("ada@example.com", "Hi"), SendAt: time.Now().Add(time.Hour)})
	for _, auth := range []string{"", "Bearer nope", "Bearer alice", "Bearer alice:s3cret-a"} {
		h.auth = auth
		for _, path := range []string{"/outbox/", "/outbox/intents", "/outbox/intent?key=welcome:1", "/outbox/static/style.css"} {
			code, body := h.do("GET", path, nil)
			if code != http.StatusUnauthorized || strings.Contains(body, "welcome:1") {
				t.Errorf("GET %s with %q: %d, want 401\n%.200s", path, auth, code, body)
			}
		}
		if code, _ := h.do("POST", "/outbox/cancel", url.Values{"key": {"welcome:1"}}); code != http.StatusUnauthorized {
			t.Errorf("POST with %q: %d, want 401", auth, code)
		}
	}
	h.auth = "Bearer s3cret-b"
	if code, body := h.do("GET", "/outbox/", nil); code != 200 || !strings.Contains(body, "bob") {
		t.Errorf("GET /outbox/ with bob's token: %d\n%.500s", code, body)
	}
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth("anyone", "s3cret-a") // as a browser's prompt sends it
	h.auth = req.Header.Get("Authorization")
	token := h.csrf("cancel", "welcome:1")
	if code, body := h.do("POST", "/outbox/cancel", url.Values{"key": {"welcome:1"}, "csrf": {token}}); code != http.StatusSeeOther {
		t.Fatalf("cancel with alice's token: %d %.300s", code, body)
	}
	if rec := h.get("welcome:1"); rec.State != outbox.StateCanceled {
		t.Errorf("the intent is %s, want canceled", rec.State)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "outbox page: canceled") || !strings.Contains(logs, "who=alice") || !strings.Contains(logs, "at=") {
		t.Errorf("the cancel was not logged with who and when:\n%s", logs)
	}
	if strings.Contains(logs, "s3cret") {
		t.Errorf("a token's secret was logged:\n%s", logs)
	}
}

// TestRetryRules: the page retries with `sendonce retry`'s rules. An
// uncertain intent past its replay window is refused with the same
// warning, and goes only when forced, which is logged as a warning.
func TestRetryRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true})
	h.enqueue(outbox.Intent{Key: "invoice:old", Payload: email("ada@example.com", "Invoice")},
		outbox.Intent{Key: "invoice:sent", Payload: email("ada@example.com", "Invoice 2"), SendAt: time.Now().Add(time.Hour)})
	h.fail("invoice:old", "503 api_error: unavailable", true, 30*time.Hour)

	if code, body := h.do("GET", "/outbox/retry?key=invoice:old", nil); code != 200 || !strings.Contains(body, "may have reached the API") {
		t.Errorf("confirmation of an uncertain retry: %d, no warning\n%.2000s", code, body)
	}
	token := h.csrf("retry", "invoice:old")
	code, body := h.do("POST", "/outbox/retry", url.Values{"key": {"invoice:old"}, "csrf": {token}})
	for _, want := range []string{"replay window", "could deliver it a second time", `id="force-form"`} {
		if code != http.StatusConflict || !strings.Contains(body, want) {
			t.Errorf("retry past the window: %d, want 409 with %q\n%.3000s", code, want, body)
		}
	}
	if rec := h.get("invoice:old"); rec.State != outbox.StateFailed {
		t.Fatalf("a refused retry left the intent %s", rec.State)
	}
	code, body = h.do("POST", "/outbox/retry", url.Values{"key": {"invoice:old"}, "csrf": {token}, "force": {"yes"}})
	if code != http.StatusSeeOther || !strings.Contains(body, "done=forced") {
		t.Fatalf("forced retry: %d %.300s", code, body)
	}
	rec := h.get("invoice:old")
	if rec.State != outbox.StatePending || rec.ForcedRetryAt == nil {
		t.Errorf("after a forced retry: %s, forced at %v", rec.State, rec.ForcedRetryAt)
	}
	if _, body := h.do("GET", "/outbox/intent?key=invoice:old&done=forced", nil); !strings.Contains(body, "delivered a second time") {
		t.Errorf("the intent page does not say the retry was forced:\n%.1000s", body)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "retried with force") {
		t.Errorf("the forced retry was not logged as a warning:\n%s", logs)
	}

	// Only a failed intent can be retried, and only a pending one before
	// any attempt canceled: the page says so and changes nothing.
	code, body = h.do("POST", "/outbox/retry", url.Values{"key": {"invoice:sent"}, "csrf": {token}})
	if code != http.StatusConflict || !strings.Contains(body, "only a failed or suppressed intent") {
		t.Errorf("retry of a pending intent: %d %.1000s", code, body)
	}
	code, body = h.do("POST", "/outbox/cancel", url.Values{"key": {"invoice:old"}, "csrf": {token}})
	if code != http.StatusConflict || !strings.Contains(body, "attempt(s) already made") {
		t.Errorf("cancel of an attempted intent: %d %.1000s", code, body)
	}
	if code, _ := h.do("POST", "/outbox/retry", url.Values{"key": {"nope:1"}, "csrf": {token}}); code != 404 {
		t.Errorf("retry of a missing intent: %d", code)
	}
}

// TestIntentDrainOrJob: the intent page shows an intent enqueued since the
// drain where it is, on the drain of its queue (its try, when a retry will
// next let it be claimed), and no River job; an intent with a River job of
// its own, as a database upgraded from a release before the drain holds,
// shows its job and links to it in the River UI.
func TestIntentDrainOrJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	h.enqueue(outbox.Intent{Key: "invoice:drained", Payload: email("ada@example.com", "Drained")},
		outbox.Intent{Key: "invoice:upgraded", Payload: email("ada@example.com", "Upgraded"), SendAt: time.Now().Add(time.Hour)})
	outboxtest.GiveJobs(t, h.pool, "invoice:upgraded")

	code, body := h.do("GET", "/outbox/intent?key=invoice:drained", nil)
	if code != 200 || !strings.Contains(body, `<td id="drain">queue <code>sendonce</code> · no River job of its own`) ||
		strings.Contains(body, "River job</th>") || strings.Contains(body, `id="job"`) {
		t.Errorf("a pending drained intent: %d, want its queue on the drain, no try, no River job:\n%.3000s", code, body)
	}
	// A try spent, and a retry waiting for its time, as the drain leaves it
	// after a 5xx.
	next := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	if _, err := h.pool.Exec(h.ctx, `UPDATE sendonce_outbox SET attempts = 1, tries = 1, uncertain = true, next_attempt_at = $2
		WHERE idempotency_key = $1`, "invoice:drained", next); err != nil {
		t.Fatal(err)
	}
	if _, body := h.do("GET", "/outbox/intent?key=invoice:drained", nil); !strings.Contains(body,
		`<td id="drain">queue <code>sendonce</code>, <span id="tries">try 1</span>, next attempt 2031-05-06 07:08:09Z ·`) {
		t.Errorf("a drained intent waiting for its retry: want try 1 and its next attempt:\n%.3000s", body)
	}

	rec := h.get("invoice:upgraded")
	if rec.JobID == nil {
		t.Fatal("GiveJobs gave no job")
	}
	code, body = h.do("GET", "/outbox/intent?key=invoice:upgraded", nil)
	want := fmt.Sprintf(`<a id="job" href="/riverui/jobs/%d">%d</a> sendonce_send, scheduled, <span id="tries">attempt 0</span>`, *rec.JobID, *rec.JobID)
	if code != 200 || !strings.Contains(body, want) || strings.Contains(body, `id="drain"`) {
		t.Errorf("an intent with a River job of its own: %d, want %q and no drain:\n%.3000s", code, want, body)
	}
}

// TestListAndOverview: the filters, paging by id (newest first), and the overview's
// figures.
func TestListAndOverview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	var in []outbox.Intent
	for _, k := range append(keys(55, "invoice:2026-11-%03d"), keys(3, "invoice:2026-12-%03d")...) {
		in = append(in, outbox.Intent{Key: k, Payload: email("ada@example.com", "Invoice "+k), SendAt: time.Now().Add(time.Hour)})
	}
	h.enqueue(in...)
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.ob.EnqueueRun(h.ctx, tx, outbox.Run{Key: "billing:2026-10", SendAt: time.Now().Add(time.Hour), Intents: []outbox.Intent{
			{Key: "invoice:2026-10-001", Payload: email("ada@example.com", "October")},
			{Key: "invoice:2026-10-002", Payload: email("bob@example.com", "October")}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ob.PauseRun(h.ctx, "billing:2026-10"); err != nil {
		t.Fatal(err)
	}
	h.fail("invoice:2026-11-007", "422 invalid_request_error: to: not an address", false, time.Minute)
	h.fail("invoice:2026-11-008", "422 invalid_request_error: to: not an address", false, time.Minute)
	if _, err := h.pool.Exec(h.ctx, `UPDATE sendonce_outbox SET state = 'sent', sent_at = now() - interval '2 minutes', message_id = 'msg_' || id
		WHERE idempotency_key LIKE 'invoice:2026-12-%'`); err != nil {
		t.Fatal(err)
	}

	code, body := h.do("GET", "/outbox/intents?prefix=invoice:2026-11-", nil)
	if code != 200 || strings.Count(body, `class="key"`) != 50 || strings.Contains(body, "invoice:2026-12-") ||
		!strings.Contains(body, "invoice:2026-11-055") || strings.Contains(body, "invoice:2026-11-005") {
		t.Fatalf("first page (newest first): %d, %d rows", code, strings.Count(body, `class="key"`))
	}
	next := nextLink.FindStringSubmatch(body)
	if next == nil {
		t.Fatal("no next page link on a full page")
	}
	code, body = h.do("GET", strings.ReplaceAll(next[1], "&amp;", "&"), nil)
	if code != 200 || strings.Count(body, `class="key"`) != 5 || !strings.Contains(body, "invoice:2026-11-001") || nextLink.MatchString(body) {
		t.Errorf("second page: %d, %d rows", code, strings.Count(body, `class="key"`))
	}
	if _, body := h.do("GET", "/outbox/intents?state=failed&kind=email", nil); strings.Count(body, `class="key"`) != 2 {
		t.Errorf("state=failed: %d rows, want 2", strings.Count(body, `class="key"`))
	}
	if _, body := h.do("GET", "/outbox/intents?run=billing:2026-10", nil); strings.Count(body, `class="key"`) != 2 {
		t.Errorf("run=billing:2026-10: %d rows, want 2", strings.Count(body, `class="key"`))
	}
	if _, body := h.do("GET", "/outbox/intents?to=2000-01-01T00:00", nil); !strings.Contains(body, "No intents match") {
		t.Error("a time range before every intent listed some")
	}
	if code, body := h.do("GET", "/outbox/intents?from=yesterday", nil); code != 400 || !strings.Contains(body, "from: want a time") {
		t.Errorf("a bad time: %d %.300s", code, body)
	}
	if code, body := h.do("GET", "/outbox/intents?state=lost", nil); code != 400 || !strings.Contains(body, `unknown state &#34;lost&#34;`) {
		t.Errorf("a bad state: %d %.300s", code, body)
	}

	code, body = h.do("GET", "/outbox/", nil)
	if code != 200 {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{
		`<span class="n">55</span><span class="l">pending</span>`,
		`<code>billing:2026-10</code></a></td><td><span class="badge st-failed">paused</span></td><td class="num">0</td><td class="num">2</td>`,
		`<span class="n">2</span><span class="l">failed</span>`,
		`<span class="n">3</span><span class="l">sent</span>`,
		"3 sent in the hour, at most 3 a minute",
		"422 invalid_request_error: to: not an address",
		"No budget yet",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if n := strings.Count(body, " sent</title>"); n != 60 {
		t.Errorf("the chart has %d bars, want 60", n)
	}
}

var nextLink = regexp.MustCompile(`id="next" href="([^"]+)"`)

// TestEscapesThePayload: what an intent holds is text on the page, never
// markup.
func TestEscapesThePayload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true})
	h.enqueue(outbox.Intent{Key: "xss:1", Payload: email("ada@example.com", xss)})
	h.fail("xss:1", "422 invalid_request_error: "+xss, false, time.Minute)
	// A delivery event whose raw JSON holds a script too.
	if _, err := h.pool.Exec(h.ctx, `INSERT INTO sendonce_event (delivery_id, event_id, type, email_id, occurred_at, raw, intent_id)
		SELECT 'dlv_1', 'evt_1', 'email.bounced', 'msg_1', now(), jsonb_build_object('type', 'email.bounced', 'reason', $1::text), id
		FROM sendonce_outbox WHERE idempotency_key = 'xss:1'`, xss); err != nil {
		t.Fatal(err)
	}
	if _, body := h.do("GET", "/outbox/intent?key=xss:1", nil); !strings.Contains(body, "email.bounced") || !strings.Contains(body, "dlv_1") {
		t.Errorf("the intent page does not show its event:\n%.3000s", body)
	}
	for _, path := range []string{"/outbox/intent?key=xss:1", "/outbox/intents", "/outbox/", "/outbox/retry?key=xss:1"} {
		code, body := h.do("GET", path, nil)
		if code != 200 || strings.Contains(body, "<script") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: %d: the subject is not escaped\n%.3000s", path, code, body)
		}
	}
}

const xss = `<script>alert(1)</script>`

// TestBatchIntent: a batch intent's page shows each email's addresses and
// subject, with the bodies only in the collapsed payload.
func TestBatchIntent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	h.enqueue(outbox.Intent{Key: "batch:1", Kind: outbox.KindBatch, Payload: json.RawMessage(`{"emails":[
		{"from":"a@example.com","to":["one@example.com"],"cc":["boss@example.com"],"subject":"First","text":"BODY ONE"},
		{"from":"a@example.com","to":["two@example.com","three@example.com"],"subject":"Second","html":"<p>BODY TWO</p>"}]}`)})
	code, body := h.do("GET", "/outbox/intent?key=batch:1", nil)
	if code != 200 {
		t.Fatalf("GET: %d", code)
	}
	main := body[:strings.Index(body, `<details id="payload">`)]
	for _, want := range []string{"one@example.com", "boss@example.com", "First", "two@example.com, three@example.com", "Second"} {
		if !strings.Contains(main, want) {
			t.Errorf("the page lacks %q before the payload", want)
		}
	}
	if strings.Contains(main, "BODY") {
		t.Error("a body is shown outside the collapsed payload")
	}
	if !strings.Contains(body, "BODY ONE") || !strings.Contains(body, "&lt;p&gt;BODY TWO&lt;/p&gt;") {
		t.Error("the collapsed payload lacks the bodies")
	}
}
