package outboxui_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestBrowserActionsFitTheState drives the run and intent pages in a real
// headless Chromium with the API down: an intent retrying after attempts
// that never connected can be canceled from its page, one whose attempt
// may have reached the API cannot (and the page says why); tries show
// against the workers' --max-attempts (4 here), not River's job limit of
// 100; and a run whose members are all sent shows done, as `sendonce runs`
// says.
func TestBrowserActionsFitTheState(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{actions: true, maxAttempts: 4})
	ctx := browser(t, "", &dialogs)
	h.enqueue(
		outbox.Intent{Key: "invoice:down", Payload: email("ada@example.com", "Invoice down")},
		outbox.Intent{Key: "invoice:maybe", Payload: email("bo@example.com", "Invoice maybe")},
		outbox.Intent{Key: "invoice:upgraded", Payload: email("cy@example.com", "Invoice upgraded")},
	)
	// As the drain leaves them after attempts with the API down: three
	// refused connections (certain), or a 503 (uncertain).
	pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET attempts = 3, tries = 3, uncertain = false, first_attempt_at = now(),
			next_attempt_at = now() + interval '1 hour',
			last_error = 'POST http://127.0.0.1:1/emails: dial tcp 127.0.0.1:1: connect: connection refused'
		WHERE idempotency_key = 'invoice:down'`)
	pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET attempts = 2, tries = 2, uncertain = true, first_attempt_at = now(),
			next_attempt_at = now() + interval '1 hour', last_error = '503 unavailable: try later'
		WHERE idempotency_key = 'invoice:maybe'`)
	// An intent with a River job of its own (a database upgraded from a
	// release before the drain), on its third attempt.
	outboxtest.GiveJobs(t, h.pool, "invoice:upgraded")
	pgtest.Exec(t, h.pool, `UPDATE river_job SET attempt = 3 WHERE id = (SELECT job_id FROM sendonce_outbox WHERE idempotency_key = 'invoice:upgraded')`)
	// A run of 40, all sent.
	var members []outbox.Intent
	for i := range 40 {
		members = append(members, outbox.Intent{Key: fmt.Sprintf("billing:done:%d", i), Payload: email("dan@example.com", "Invoice")})
	}
	if err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.ob.EnqueueRun(h.ctx, tx, outbox.Run{Key: "billing:done", Intents: members})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET state = 'sent', attempts = 1, sent_at = now(), message_id = 'msg_' || id WHERE run_key = 'billing:done'`)

	base := h.srv.URL + "/outbox/"
	run(t, ctx, "open the certain intent", chromedp.Navigate(base+"intent?key=invoice:down"))
	if s := text(t, ctx, "#tries"); s != "3 of 4 tries made" {
		t.Errorf("tries shown as %q, want 3 of 4 tries made", s)
	}
	follow(t, ctx, "#cancel")
	if body := text(t, ctx, "main"); !strings.Contains(body, "none of which can have reached the API") {
		t.Errorf("the cancel's confirmation does not say nothing reached the API:\n%s", body)
	}
	follow(t, ctx, "#confirm")
	if d := text(t, ctx, "#done"); !strings.Contains(d, "Canceled") {
		t.Errorf("after the cancel the page says %q", d)
	}
	if s := text(t, ctx, "#state"); s != "canceled" {
		t.Errorf("after the cancel the intent shows %q", s)
	}
	if rec := h.get("invoice:down"); rec.State != outbox.StateCanceled {
		t.Errorf("after the cancel the row is %s", rec.State)
	}

	run(t, ctx, "open the uncertain intent", chromedp.Navigate(base+"intent?key=invoice:maybe"))
	if eval[bool](t, ctx, `document.querySelector("#cancel") !== null`) {
		t.Errorf("an uncertain intent offers a cancel")
	}
	if s := text(t, ctx, "#tries"); s != "2 of 4 tries made" {
		t.Errorf("tries shown as %q, want 2 of 4 tries made", s)
	}
	run(t, ctx, "open its cancel", chromedp.Navigate(base+"cancel?key=invoice:maybe"))
	if r := text(t, ctx, "#refusal"); !strings.Contains(r, "2 send attempt(s) already made, and one may have reached the API") {
		t.Errorf("the cancel of an uncertain intent says %q", r)
	}
	if eval[bool](t, ctx, `document.querySelector("#confirm") !== null`) {
		t.Errorf("the cancel of an uncertain intent can be confirmed")
	}

	run(t, ctx, "open the upgraded intent", chromedp.Navigate(base+"intent?key=invoice:upgraded"))
	if s := text(t, ctx, "#tries"); s != "attempt 3 of 4" {
		t.Errorf("the River job's attempt shown as %q, want attempt 3 of 4 (not River's limit of 100)", s)
	}

	run(t, ctx, "open the overview", chromedp.Navigate(base))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("#runs tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)
	found := false
	for _, r := range rows {
		if strings.HasPrefix(r, "billing:done ") {
			found = true
			if !strings.HasPrefix(r, "billing:done done 40 ") {
				t.Errorf("the finished run shows as %q, want done, as sendonce runs says", r)
			}
		}
	}
	if !found {
		t.Errorf("no row for billing:done in %q", rows)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}
