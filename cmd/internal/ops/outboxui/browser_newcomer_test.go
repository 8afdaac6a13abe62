package outboxui_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// rows is the visible text of each row of the table sel, header first.
func rows(t *testing.T, ctx context.Context, sel string) []string {
	t.Helper()
	return eval[[]string](t, ctx, `[...document.querySelectorAll("`+sel+` tr")].map(r => r.innerText)`)
}

// listRows opens the list of intents at url and returns its rows, header
// first, failing the test unless it lists n intents.
func listRows(t *testing.T, ctx context.Context, url string, n int) []string {
	t.Helper()
	run(t, ctx, "open the list", chromedp.Navigate(url))
	got := rows(t, ctx, "#intents")
	if len(got) != n+1 {
		t.Fatalf("the list %s has rows %q, want a header and %d", url, got, n)
	}
	return got
}

// TestBrowserScheduledAndDue: an intent held until 2030 is shown as
// scheduled, with its time, not as "oldest pending: none"; one due now is
// shown as due, and the list tells the two apart.
func TestBrowserScheduledAndDue(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{})
	ctx := browser(t, "", &dialogs)
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	h.enqueue(outbox.Intent{Key: "reminder:2030", Payload: email("ada@example.com", "Renewal"), SendAt: at})

	base := h.srv.URL + "/outbox/"
	run(t, ctx, "open the overview", chromedp.Navigate(base))
	if s := text(t, ctx, "#scheduled"); !strings.Contains(s, "1") || !strings.Contains(s, "2030-01-02 09:00:00Z") {
		t.Errorf("the overview's scheduled card says %q, want 1 scheduled, next at 2030-01-02 09:00:00Z", s)
	}
	if s := text(t, ctx, "#due"); !strings.HasPrefix(s, "0") {
		t.Errorf("the overview's due card says %q, want 0 due", s)
	}

	h.enqueue(outbox.Intent{Key: "welcome:now", Payload: email("bob@example.com", "Welcome")})
	run(t, ctx, "reload the overview", chromedp.Reload())
	if s := text(t, ctx, "#due"); !strings.HasPrefix(s, "1") {
		t.Errorf("the overview's due card says %q, want 1 due", s)
	}
	if s := text(t, ctx, "#oldest"); s == "none" {
		t.Errorf("an intent is due and the overview's oldest due says %q", s)
	}

	got := listRows(t, ctx, base+"intents?state=pending", 2)
	if !strings.Contains(got[1], "welcome:now") || !strings.Contains(got[1], "due") {
		t.Errorf("the newest row %q should be welcome:now, due", got[1])
	}
	if !strings.Contains(got[2], "reminder:2030") || !strings.Contains(got[2], "scheduled 2030-01-02 09:00:00Z") {
		t.Errorf("the row %q should be reminder:2030, scheduled 2030-01-02 09:00:00Z", got[2])
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}

// TestBrowserUncertainFailures: a failure that may have been delivered (a
// 503 after an attempt that reached the API) is marked uncertain wherever
// failures are listed, and a certain 422 is not; the list is newest first
// with last attempt and uncertain columns; a read-only page says how to
// retry.
func TestBrowserUncertainFailures(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{})
	ctx := browser(t, "", &dialogs)
	h.enqueue(outbox.Intent{Key: "invoice:refused", Payload: email("ada@example.com", "Invoice 1")})
	h.enqueue(outbox.Intent{Key: "invoice:maybe", Payload: email("bob@example.com", "Invoice 2")})
	h.enqueue(outbox.Intent{Key: "invoice:pending", Payload: email("carol@example.com", "Invoice 3")})
	h.fail("invoice:refused", "422 validation_error: to[0]: not a valid address", false, time.Minute)
	h.fail("invoice:maybe", "503 api_error: upstream unavailable", true, time.Minute)

	base := h.srv.URL + "/outbox/"
	run(t, ctx, "open the overview", chromedp.Navigate(base))
	for _, row := range rows(t, ctx, "#failures")[1:] {
		switch {
		case strings.Contains(row, "503"):
			if !strings.Contains(row, "uncertain") {
				t.Errorf("the failures row of the 503 %q is not marked uncertain", row)
			}
		case strings.Contains(row, "422"):
			if strings.Contains(row, "uncertain") {
				t.Errorf("the failures row of the certain 422 %q is marked uncertain", row)
			}
		}
	}

	got := listRows(t, ctx, base+"intents", 3)
	if !strings.Contains(got[0], "last attempt") || !strings.Contains(got[0], "uncertain") {
		t.Errorf("the list's header %q lacks the last attempt and uncertain columns", got[0])
	}
	order := []string{"invoice:pending", "invoice:maybe", "invoice:refused"}
	for i, key := range order {
		if !strings.Contains(got[i+1], key) {
			t.Errorf("row %d is %q, want %s (newest first)", i+1, got[i+1], key)
		}
	}
	if !strings.Contains(got[2], "uncertain") || strings.Contains(got[3], "uncertain") {
		t.Errorf("only the 503's row should say uncertain: %q, %q", got[2], got[3])
	}
	if !strings.Contains(got[3], time.Now().UTC().Format("2006-01-02")) {
		t.Errorf("the certain failure's row %q shows no last attempt", got[3])
	}

	// Read-only: the failed list and the failed intent say how to retry.
	run(t, ctx, "open the failed", chromedp.Navigate(base+"intents?state=failed"))
	if s := text(t, ctx, "#retry-hint"); !strings.Contains(s, "sendonce retry") || !strings.Contains(s, "--ui-actions") {
		t.Errorf("the read-only list of failed intents says %q, want how to retry", s)
	}
	run(t, ctx, "open the failed intent", chromedp.Navigate(base+"intent?key=invoice%3Arefused"))
	if s := text(t, ctx, "#retry-hint"); !strings.Contains(s, "sendonce retry invoice:refused") || !strings.Contains(s, "--ui-actions") {
		t.Errorf("the read-only failed intent says %q, want how to retry it", s)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}

// TestBrowserWebhooksOnOrOff: the overview says whether this worker
// receives the API's delivery webhooks, and when any worker last stored
// one, so that zeros under delivery status can be read.
func TestBrowserWebhooksOnOrOff(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	on := newHarness(t, setup{webhookAddr: "127.0.0.1:9465"})
	off := newHarness(t, setup{})
	ctx := browser(t, "", &dialogs)
	run(t, ctx, "open the overview with webhooks", chromedp.Navigate(on.srv.URL+"/outbox/"))
	if s := text(t, ctx, "#webhooks"); !strings.Contains(s, "This worker receives them, on 127.0.0.1:9465") || !strings.Contains(s, "No event stored yet") {
		t.Errorf("with --webhook-addr the overview says %q", s)
	}
	run(t, ctx, "open the overview without webhooks", chromedp.Navigate(off.srv.URL+"/outbox/"))
	if s := text(t, ctx, "#webhooks"); !strings.Contains(s, "receives no webhooks") || !strings.Contains(s, "--webhook-addr") {
		t.Errorf("without --webhook-addr the overview says %q", s)
	}
}

// TestBrowserWorkersPanel: the overview lists the fleet's worker instances
// from their liveness leases (sendonce_worker): id, host, pid, since,
// whether it holds its lease, River's leader, and its sends in flight; a
// worker that stopped renewing is marked overdue, one whose lease a sweeper
// ended is marked lapsed.
func TestBrowserWorkersPanel(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	ctx := browser(t, "", &dialogs)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// find is the panel's row that holds s.
	find := func(rows []string, s string) string {
		for _, r := range rows {
			if strings.Contains(r, s) {
				return r
			}
		}
		return ""
	}

	// A live worker in this process, and an instance elsewhere that a
	// sweeper found dead.
	live := newHarness(t, setup{worker: true})
	pgtest.Exec(t, live.pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, started_at, renewed_at, lease_until, ended_at, end_reason)
		VALUES (902, 903, 'box-c', 77, now() - interval '2 hours', now() - interval '10 minutes', now() - interval '10 minutes', now() - interval '9 minutes', 'lapsed')`)
	var got []string
	eventually(t, 30*time.Second, "the in-process worker to hold its lease and lead River", func() bool {
		run(t, ctx, "open the overview", chromedp.Navigate(live.srv.URL+"/outbox/"))
		got = rows(t, ctx, "#workers")
		return strings.Contains(find(got, host), "leader")
	})
	if len(got) != 3 {
		t.Fatalf("the workers panel has rows %q, want a header and 2", got)
	}
	if row := find(got, fmt.Sprintf("%s\t%d", host, os.Getpid())); !strings.Contains(row, "held") || !strings.Contains(row, "0 sending") {
		t.Errorf("the live worker's row is %q, want it held, leader, 0 sending", row)
	}
	if row := find(got, "box-c\t77"); !strings.Contains(row, "lapsed") || strings.Contains(row, "leader") {
		t.Errorf("the dead worker's row is %q, want it lapsed and not leader", row)
	}

	// A worker paused past its lease with a send claimed under it, before
	// any sweeper has ended the lease (here no worker runs a sweeper).
	paused := newHarness(t, setup{})
	pgtest.Exec(t, paused.pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, started_at, renewed_at, lease_until)
		VALUES (900, 901, 'box-b', 4242, now() - interval '1 hour', now() - interval '40 seconds', now() - interval '35 seconds')`)
	paused.enqueue(outbox.Intent{Key: "invoice:held", Payload: email("ada@example.com", "Invoice")})
	pgtest.Exec(t, paused.pool, `UPDATE sendonce_outbox SET state = 'sending', attempts = 1, claimed_by = 901, first_attempt_at = now()
		WHERE idempotency_key = 'invoice:held'`)
	run(t, ctx, "open the overview", chromedp.Navigate(paused.srv.URL+"/outbox/"))
	if row := find(rows(t, ctx, "#workers"), "box-b\t4242"); !strings.Contains(row, "overdue") || !strings.Contains(row, "1 sending") ||
		strings.Contains(row, "leader") {
		t.Errorf("the paused worker's row is %q, want it overdue with 1 sending", row)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}
