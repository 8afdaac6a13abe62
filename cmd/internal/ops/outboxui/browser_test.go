package outboxui_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/machine/sysdeps"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// EnvScreenshot, when set, makes TestBrowserRetry save a screenshot of the
// overview to that file (docs/outbox.png, in docs/outbox-page.md):
//
//	SENDONCE_SCREENSHOT=$PWD/docs/outbox.png go run ./internal/cmd/withpg -- go test -run TestBrowserRetry ./cmd/internal/ops/outboxui/
const EnvScreenshot = "SENDONCE_SCREENSHOT"

// browser starts a headless Chromium for the test, sending auth as the
// Authorization header of every request, and reports JavaScript dialogs
// (alert, confirm) in dialogs. It skips the test, saying the one command to
// run, when Chromium is not installed (make test installs it).
func browser(t *testing.T, auth string, dialogs *atomic.Int32) context.Context {
	t.Helper()
	path, err := sysdeps.Chromium.Find()
	if err != nil {
		t.Skipf("browser test skipped: Chromium not found (%v); install it with: %s (make test does)", err, sysdeps.Command(sysdeps.Chromium))
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		// Without these Chromium reaches out to the network, and hangs on a
		// machine that has none.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	if auth != "" {
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": auth}}); err != nil {
			t.Fatal(err)
		}
	}
	// A dialog (alert, confirm) would mean a script ran: count it, and close
	// it so the test goes on to fail rather than hang.
	go func() {
		for _, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return ctx
}

// text is the visible text of the element sel (a CSS selector).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// follow clicks sel (a CSS selector) and waits for the page it loads.
func follow(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	if resp.Status >= 400 {
		t.Fatalf("click %s: HTTP %d", sel, resp.Status)
	}
}

// TestBrowserRetry drives the page as an operator would, in a real
// headless Chromium, against a real worker and the fake API: the overview,
// the list filtered by a key prefix, an intent that failed, its retry,
// and the intent sent.
func TestBrowserRetry(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	// The fake API refuses ada's first email (a 422, certain: nothing was
	// delivered); the retry goes through.
	h := newHarness(t, setup{actions: true, worker: true, token: "alice:s3cret", auth: "Bearer s3cret", webhookAddr: "127.0.0.1:9465",
		faults: []fakeapi.Fault{{Kind: fakeapi.FaultReject, To: "refused@", Times: 1, Code: "recipient_rejected"}}})
	ctx := browser(t, h.auth, &dialogs)
	h.enqueue(
		outbox.Intent{Key: "invoice:2026-11-0001", Payload: email("bob@example.com", "Invoice 0001")},
		outbox.Intent{Key: "invoice:2026-11-0002", Payload: email("refused@example.com", "Invoice 0002")},
		outbox.Intent{Key: "invoice:2026-12-0001", Payload: email("carol@example.com", "Invoice for December")},
		outbox.Intent{Key: "welcome:user_7", Payload: email("dan@example.com", "Welcome")},
	)
	eventually(t, 30*time.Second, "the refused intent to fail and the others to be sent", func() bool {
		// Sent as the rows say: a delivery the fake holds may not be
		// recorded yet.
		return h.get("invoice:2026-11-0002").State == outbox.StateFailed &&
			outboxtest.Value[int](t, h.pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == 3
	})

	// The overview.
	base := h.srv.URL + "/outbox/"
	run(t, ctx, "open the overview", chromedp.Navigate(base))
	states := text(t, ctx, "#states")
	for _, want := range []string{"3\nsent", "1\nfailed"} {
		if !strings.Contains(states, want) {
			t.Errorf("overview states %q lack %q", states, want)
		}
	}
	if f := text(t, ctx, "#failures"); !strings.Contains(f, "recipient_rejected") {
		t.Errorf("the failures by error lack the 422: %q", f)
	}
	if bars := eval[int](t, ctx, `document.querySelectorAll("#chart rect[fill='#2f81f7']").length`); bars != 60 {
		t.Errorf("the chart has %d bars, want 60", bars)
	}

	// The list, filtered by key prefix through the form.
	follow(t, ctx, `header a[href="/outbox/intents"]`)
	run(t, ctx, "type a key prefix", chromedp.SendKeys(chromedp.CSS("#prefix"), "invoice:2026-11-"))
	follow(t, ctx, "#filter")
	listed := eval[[]string](t, ctx, `[...document.querySelectorAll("#intents a.key")].map(a => a.textContent)`)
	if strings.Join(listed, " ") != "invoice:2026-11-0002 invoice:2026-11-0001" { // newest first
		t.Errorf("filtered by invoice:2026-11-: %q", listed)
	}

	// The failed intent, and its retry.
	follow(t, ctx, `a[href="/outbox/intent?key=invoice%3A2026-11-0002"]`)
	if s := text(t, ctx, "#state"); s != "failed" {
		t.Errorf("the intent shows state %q", s)
	}
	if e := text(t, ctx, "#last-error"); !strings.Contains(e, "recipient_rejected") {
		t.Errorf("last error %q", e)
	}
	open := eval[bool](t, ctx, `document.querySelector("#payload").open`)
	if body := text(t, ctx, "main"); open || !strings.Contains(body, "refused@example.com") || !strings.Contains(body, "Invoice 0002") {
		t.Errorf("the addresses and subject should show with the payload collapsed (open=%v):\n%s", open, body)
	}
	follow(t, ctx, "#retry")
	follow(t, ctx, "#confirm")
	if d := text(t, ctx, "#done"); !strings.Contains(d, "Retried") {
		t.Errorf("after the retry the page says %q", d)
	}
	// The worker sends it; reload until the page says so.
	deadline := time.Now().Add(30 * time.Second)
	for {
		run(t, ctx, "reload the intent", chromedp.Reload())
		if text(t, ctx, "#state") == "sent" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retried intent is still %q after 30 s", text(t, ctx, "#state"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	rec := h.get("invoice:2026-11-0002")
	if id := text(t, ctx, "#message-id"); id != rec.MessageID || id == "" {
		t.Errorf("the page shows message id %q, the row has %q", id, rec.MessageID)
	}
	// The retry put it back on the drain, not on a River job of its own:
	// the page shows the drain's state (its queue, the try that sent it)
	// and links to no job.
	if rec.JobID != nil || eval[bool](t, ctx, `document.querySelector("#job") !== null`) {
		t.Errorf("the retried intent has River job %v, or the page links to one", rec.JobID)
	}
	if d := text(t, ctx, "#drain"); !strings.Contains(d, "queue sendonce, try 1 ") || strings.Contains(d, "next attempt") {
		t.Errorf("the drain's state of the retried intent shows as %q, want queue sendonce, try 1, no next attempt", d)
	}
	if n := len(h.fake.DeliveriesTo("refused@example.com")); n != 1 {
		t.Errorf("%d deliveries to the retried address, want 1", n)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "outbox page: retried") || !strings.Contains(logs, "who=alice") {
		t.Errorf("the retry was not logged with the token's name")
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
	if path := os.Getenv(EnvScreenshot); path != "" {
		screenshot(t, ctx, h, base, path)
	}
}

// TestBrowserXSS: a subject and an error holding a script show as text,
// and no script runs.
func TestBrowserXSS(t *testing.T) {
	t.Parallel()
	var dialogs atomic.Int32
	h := newHarness(t, setup{actions: true})
	ctx := browser(t, "", &dialogs)
	h.enqueue(outbox.Intent{Key: "xss:1", Payload: email("ada@example.com", xss)})
	h.fail("xss:1", "422 invalid_request_error: "+xss, false, time.Minute)
	for _, path := range []string{"/outbox/intent?key=xss:1", "/outbox/intents", "/outbox/", "/outbox/retry?key=xss:1"} {
		run(t, ctx, "open "+path, chromedp.Navigate(h.srv.URL+path))
		if scripts := eval[int](t, ctx, `document.scripts.length`); scripts != 0 {
			t.Errorf("%s: %d script elements in the page", path, scripts)
		}
		if body := text(t, ctx, "main"); !strings.Contains(body, xss) {
			t.Errorf("%s: the script is not shown as text:\n%s", path, body)
		}
	}
	run(t, ctx, "open the intent", chromedp.Navigate(h.srv.URL+"/outbox/intent?key=xss:1"))
	if subject := text(t, ctx, ".subject"); subject != xss {
		t.Errorf("subject shown as %q, want %q", subject, xss)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened: a script ran", n)
	}
}

// screenshot fills the outbox with an hour of sends and a few failures,
// and saves the overview as a PNG.
func screenshot(t *testing.T, ctx context.Context, h *harness, base, path string) {
	var in []outbox.Intent
	for i := range 400 {
		in = append(in, outbox.Intent{Key: fmt.Sprintf("invoice:2026-11-%04d", 100+i), Payload: email("customer@example.com", "Invoice")})
	}
	h.enqueue(in...)
	eventually(t, time.Minute, "400 more sent", func() bool { return len(h.fake.Deliveries()) >= 404 })
	// Spread the sends over the hour, as a steady day would.
	if _, err := h.pool.Exec(h.ctx, `UPDATE sendonce_outbox SET sent_at = now() - ((id * 7919) % 3600) * interval '1 second' * (0.5 + 0.5 * sin(id::float8 / 40))
		WHERE state = 'sent'`); err != nil {
		t.Fatal(err)
	}
	// What the delivery webhooks said of them.
	if _, err := h.pool.Exec(h.ctx, `UPDATE sendonce_outbox SET delivery_status = CASE WHEN id % 53 = 0 THEN 'bounced'
			WHEN id % 97 = 0 THEN 'complained' WHEN id % 10 < 8 THEN 'delivered' ELSE 'delivery_delayed' END,
			delivery_status_at = sent_at + interval '3 seconds' WHERE state = 'sent'`); err != nil {
		t.Fatal(err)
	}
	// A billing run held until tomorrow, paused.
	var members []outbox.Intent
	for i := range 120 {
		members = append(members, outbox.Intent{Key: fmt.Sprintf("invoice:2026-12-%04d", 100+i), Payload: email("customer@example.com", "Invoice")})
	}
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.ob.EnqueueRun(h.ctx, tx, outbox.Run{Key: "billing:2026-12", SendAt: time.Now().Add(24 * time.Hour), Intents: members})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ob.PauseRun(h.ctx, "billing:2026-12"); err != nil {
		t.Fatal(err)
	}
	var late []outbox.Intent
	for i := range 6 {
		late = append(late, outbox.Intent{Key: fmt.Sprintf("digest:2026-12-01:user_%d", i), Payload: email("reader@example.com", "Digest"),
			SendAt: time.Now().Add(time.Hour)})
	}
	h.enqueue(late...)
	h.fail("digest:2026-12-01:user_0", "422 validation_error: to[0]: not a valid address", false, time.Minute)
	h.fail("digest:2026-12-01:user_1", "422 validation_error: to[0]: not a valid address", false, time.Minute)
	h.fail("digest:2026-12-01:user_2", "replay window 23h0m0s from the first attempt has passed: 503 api_error", true, 30*time.Hour)
	run(t, ctx, "size the window", chromedp.EmulateViewport(1280, 900))
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base))
	if err != nil || resp.Status != 200 {
		t.Fatalf("overview for the screenshot: %v, %v", err, resp)
	}
	if s := text(t, ctx, "#runs"); !strings.Contains(s, "billing:2026-12") {
		t.Fatalf("the overview shows no run: %q", s)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("overview saved to %s", path)
}
