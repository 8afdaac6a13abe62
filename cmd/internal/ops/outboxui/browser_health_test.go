package outboxui_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// exists reports whether the page has an element sel (a CSS selector).
func exists(t *testing.T, ctx context.Context, sel string) bool {
	t.Helper()
	return eval[bool](t, ctx, `document.querySelector("`+sel+`") !== null`)
}

// shown is the visible text of the element sel, "" when the page has none
// (text waits for the element).
func shown(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return eval[string](t, ctx, `document.querySelector("`+sel+`")?.innerText ?? ""`)
}

// TestBrowserHealthSending: with a live worker and the API answering, the
// overview's verdict is "Sending", with the last send's minute, no error
// in the last 5 minutes, the as-of time, and no retrying panel.
func TestBrowserHealthSending(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{worker: true, maxAttempts: 5})
	ctx := browser(t, "", &dialogs)
	h.enqueue(outbox.Intent{Key: "welcome:ok", Payload: email("ada@example.com", "Welcome")})
	eventually(t, 30*time.Second, "the intent sent", func() bool { return h.get("welcome:ok").State == outbox.StateSent })

	run(t, ctx, "open the overview", chromedp.Navigate(h.srv.URL+"/outbox/"))
	today := time.Now().UTC().Format("2006-01-02")
	if v := shown(t, ctx, "#verdict"); !strings.HasPrefix(v, "Sending: nothing due now") {
		t.Errorf("the verdict says %q, want Sending, nothing due", v)
	}
	if s := shown(t, ctx, "#last-sent"); !strings.Contains(s, "in the minute of "+today) {
		t.Errorf("the last send says %q, want a minute of today", s)
	}
	if s := shown(t, ctx, "#error-rate"); !strings.Contains(s, "0 of 1 intents (0%)") {
		t.Errorf("the error rate says %q, want 0 of 1", s)
	}
	if s := shown(t, ctx, "#as-of"); !strings.Contains(s, "As of "+today) {
		t.Errorf("the as-of line says %q", s)
	}
	if exists(t, ctx, "#retrying") || exists(t, ctx, "#health-error") {
		t.Errorf("a healthy outbox shows a retrying panel or a last error:\n%s", text(t, ctx, "main"))
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}

// TestBrowserHealthAPIDown: with the fake API stopped under a running
// worker, within 10 s of the stop the overview says the API is failing,
// since when, with the last error, and the retrying panel shows the
// intents by that error, with the next attempt and the attempts left of
// the configured maximum.
func TestBrowserHealthAPIDown(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	// A minute's backoff keeps the retrying intents pending between the
	// page's reads.
	h := newHarness(t, setup{worker: true, maxAttempts: 5, retryBase: time.Minute})
	ctx := browser(t, "", &dialogs)
	h.enqueue(outbox.Intent{Key: "welcome:before", Payload: email("ada@example.com", "Welcome")})
	eventually(t, 30*time.Second, "the first intent sent", func() bool { return h.get("welcome:before").State == outbox.StateSent })

	h.fake.Close()
	stopped := time.Now()
	h.enqueue(outbox.Intent{Key: "invoice:down-1", Payload: email("bob@example.com", "Invoice 1")},
		outbox.Intent{Key: "invoice:down-2", Payload: email("carol@example.com", "Invoice 2")})
	var verdict, retrying string
	for {
		run(t, ctx, "open the overview", chromedp.Navigate(h.srv.URL+"/outbox/"))
		verdict = shown(t, ctx, "#verdict")
		retrying = shown(t, ctx, "#retrying")
		if strings.HasPrefix(verdict, "API failing since ") && strings.Contains(retrying, "Retrying: 2 intents") {
			break
		}
		if time.Since(stopped) > 10*time.Second {
			t.Fatalf("10 s after the API stopped the verdict says %q and the retrying panel %q", verdict, retrying)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the page said so %s after the API stopped", time.Since(stopped).Round(time.Millisecond))

	today := time.Now().UTC().Format("2006-01-02")
	if !strings.HasPrefix(verdict, "API failing since "+today) || !strings.Contains(verdict, "connection refused") {
		t.Errorf("the verdict %q lacks since when, or the last error", verdict)
	}
	if s := shown(t, ctx, "#health-error"); !strings.Contains(s, "connection refused") {
		t.Errorf("the last error shows as %q", s)
	}
	if s := shown(t, ctx, "#error-rate"); !strings.Contains(s, "2 of 3 intents (67%)") {
		t.Errorf("the error rate says %q, want 2 of 3 (two retrying, one sent)", s)
	}
	if s := shown(t, ctx, "#last-sent"); !strings.Contains(s, "in the minute of "+today) {
		t.Errorf("the last send says %q", s)
	}
	groups := rows(t, ctx, "#retrying-groups")
	if len(groups) != 2 {
		t.Fatalf("the retrying panel has rows %q, want a header and one group", groups)
	}
	g := groups[1]
	if !strings.HasPrefix(g, "2\t") || !strings.Contains(g, "connection refused") || !strings.Contains(g, "4 of 5") ||
		!strings.Contains(g, "invoice:down-1") {
		t.Errorf("the retrying group is %q, want 2 intents, connection refused, 4 of 5 attempts left, invoice:down-1", g)
	}
	// The next attempt is the backoff's (a minute, less up to 10% jitter)
	// after the failed one: ahead, not due now.
	next := shown(t, ctx, "#retrying-groups td.next")
	at, err := time.Parse("2006-01-02 15:04:05Z", next)
	if err != nil {
		t.Fatalf("the next attempt shows as %q: %v", next, err)
	}
	if d := time.Until(at); d < 30*time.Second || d > 70*time.Second {
		t.Errorf("the next attempt is %s (in %s), want about a minute after the failed one", next, d.Round(time.Second))
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}

// TestBrowserHealthVerdicts: the verdicts that say why nothing is sent:
// no live worker, the budget paused by a Retry-After, a quota exhausted,
// each with its time; once the worker is live and nothing holds it back,
// "Sending".
func TestBrowserHealthVerdicts(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{})
	ctx := browser(t, "", &dialogs)
	verdict := func(what string) string {
		t.Helper()
		run(t, ctx, "open the overview: "+what, chromedp.Navigate(h.srv.URL+"/outbox/"))
		return shown(t, ctx, "#verdict")
	}
	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, started_at, renewed_at, lease_until, ended_at, end_reason)
		VALUES (910, 911, 'box-a', 77, now() - interval '2 hours', '2026-03-04 05:06:07Z', '2026-03-04 05:06:17Z', '2026-03-04 05:07:00Z', 'lapsed')`)
	if v := verdict("a lapsed worker"); !strings.HasPrefix(v, "No live worker") || !strings.Contains(v, "2026-03-04 05:06:07Z") {
		t.Errorf("with no live worker the verdict says %q", v)
	}

	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, lease_until) VALUES (912, 913, 'box-b', 78, now() + interval '1 hour')`)
	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_rate_budget (key_fingerprint, paused_until) VALUES ('oe_…0000', '2099-01-02 03:04:05Z')`)
	if v := verdict("the budget paused"); !strings.HasPrefix(v, "Budget paused until 2099-01-02 03:04:05Z") {
		t.Errorf("with the budget paused the verdict says %q", v)
	}

	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_rate_quota (key_fingerprint, period, quota, period_start, resets_at, used, exhausted_until, exhausted_by)
		VALUES ('oe_…0000', 'd', 100, date_trunc('day', now()), '2099-02-03 00:00:00Z', 100, '2099-02-03 00:00:00Z', 'count')`)
	if v := verdict("a quota exhausted"); !strings.HasPrefix(v, "Quota exhausted until 2099-02-03 00:00:00Z") || !strings.Contains(v, "daily quota") {
		t.Errorf("with the quota exhausted the verdict says %q", v)
	}

	pgtest.Exec(t, h.pool, `DELETE FROM sendonce_rate_quota`)
	pgtest.Exec(t, h.pool, `UPDATE sendonce_rate_budget SET paused_until = 'epoch'`)
	h.enqueue(outbox.Intent{Key: "welcome:due", Payload: email("ada@example.com", "Welcome")})
	if v := verdict("a live worker, nothing held"); !strings.HasPrefix(v, "Sending: 1 due now") {
		t.Errorf("with a live worker and nothing holding it the verdict says %q", v)
	}
	if s := shown(t, ctx, "#last-sent"); !strings.Contains(s, "none on record") {
		t.Errorf("with nothing sent the last send says %q", s)
	}
	if s := shown(t, ctx, "#error-rate"); !strings.Contains(s, "no intent attempted") {
		t.Errorf("with nothing attempted the error rate says %q", s)
	}
}
