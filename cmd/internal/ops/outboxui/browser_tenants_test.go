package outboxui_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestBrowserTenants: a sender with only the default tenant sees no
// tenants on the overview, nor does one whose other tenants have nothing
// pending; a tenant's intents pending, or a tenant's settings, show the
// panel with sendonce tenants' figures: weight, limits and their use,
// backlog, share of the live workers' claims, and what holds each back.
func TestBrowserTenants(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{})
	ctx := browser(t, "", &dialogs)
	base := h.srv.URL + "/outbox/"
	absent := func(when string) {
		t.Helper()
		run(t, ctx, "open the overview", chromedp.Navigate(base))
		if eval[bool](t, ctx, `document.querySelector("#tenants") !== null`) ||
			strings.Contains(eval[string](t, ctx, `document.body.innerText`), "Tenants") {
			t.Errorf("%s, the overview shows tenants", when)
		}
	}
	absent("with nothing pending")
	h.enqueue(outbox.Intent{Key: "welcome:1", Payload: email("ada@example.com", "Welcome")})
	absent("with the default tenant's intents only")

	h.enqueue(outbox.Intent{Key: "invoice:acme:1", Payload: email("bo@example.com", "Invoice"), Tenant: "acme"},
		outbox.Intent{Key: "invoice:acme:2", Payload: email("cy@example.com", "Invoice"), Tenant: "acme"})
	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_tenant (name, weight, quota_day, day_start, day_count)
		VALUES ('acme', 4, 2, date_trunc('day', now(), 'UTC'), 2)`)
	pgtest.Exec(t, h.pool, `INSERT INTO sendonce_worker (id, epoch, host, pid, lease_until, tenants)
		VALUES (1, 1, 'a', 1, now() + interval '1 minute', '{"": 3, "acme": 1}')`)
	run(t, ctx, "reload the overview", chromedp.Navigate(base))
	got := rows(t, ctx, "#tenants-table")
	if len(got) != 3 {
		t.Fatalf("the tenants panel has rows %q, want a header, default and acme", got)
	}
	for i, want := range [][]string{
		{"tenant", "weight", "limits", "backlog", "share, last minute", "held by"},
		{"default", "1", "none", "1 transactional", "75% (3)", "nothing"},
		{"acme", "4", "2/d (2 used today)", "2 transactional", "25% (1)", "quota 2/d until 00:00 UTC"},
	} {
		cells := strings.Split(got[i], "\t")
		if len(cells) != len(want) {
			t.Errorf("row %d of the tenants panel is %q, want %q", i, got[i], want)
			continue
		}
		for j := range want {
			if strings.TrimSpace(cells[j]) != want[j] {
				t.Errorf("row %d, column %q of the tenants panel is %q, want %q", i, want[0], cells[j], want[j])
			}
		}
	}
	if s := text(t, ctx, "#tenants p.muted"); !strings.Contains(s, "Share: of the 4 intents claimed in the last minute by 1 live worker.") {
		t.Errorf("the tenants panel's note says %q", s)
	}

	// Nothing of acme's pending, but its settings: still shown.
	pgtest.Exec(t, h.pool, `UPDATE sendonce_outbox SET state = 'canceled', updated_at = now() WHERE tenant = 'acme'`)
	run(t, ctx, "reload the overview", chromedp.Navigate(base))
	if got := rows(t, ctx, "#tenants-table"); len(got) != 3 || !strings.Contains(got[2], "acme") || strings.Contains(got[2], "quota 2/d until") {
		t.Errorf("with acme's settings and nothing of it pending, the panel has rows %q (want acme, held by nothing)", got)
	}
	pgtest.Exec(t, h.pool, `DELETE FROM sendonce_tenant`)
	absent("with acme's intents settled and its settings reset")
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}
