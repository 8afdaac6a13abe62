package outboxui_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// resetLink is what a DNS-rebinding page must never read: the body of a
// password-reset email.
const resetLink = "https://app.example.com/reset?t=RESETLINK-4f9a2c"

// TestForeignHostWithoutToken is the DNS-rebinding attack of issue 22:
// with no UI token, on loopback, a page of attacker.example whose name
// now resolves to 127.0.0.1 sends requests with "Host: attacker.example"
// and a matching Origin, which the cross-origin check takes for the same
// origin. They must neither read an intent (the reset link in its body)
// nor cancel one, even with the page's own form token in hand; the same
// requests with a loopback Host work.
func TestForeignHostWithoutToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true})
	payload, _ := json.Marshal(map[string]any{"from": "accounts@example.com", "to": []string{"ada@example.com"},
		"subject": "Reset your password", "text": "Reset it here: " + resetLink})
	h.enqueue(outbox.Intent{Key: "password-reset:user_7:token_abc", Payload: payload, SendAt: time.Now().Add(time.Hour)})
	key := "password-reset:user_7:token_abc"
	token := h.csrf("cancel", key) // as if the attacker had read a confirmation page
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.srv.URL, "http://"))

	for _, host := range []string{"attacker.example:" + port, "attacker.example"} {
		origin := []string{"Host", host, "Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}
		for _, path := range []string{"/outbox/", "/outbox/intents", "/outbox/intent?key=" + url.QueryEscape(key),
			"/outbox/cancel?key=" + url.QueryEscape(key), "/outbox/static/style.css"} {
			code, body := h.do("GET", path, nil, origin...)
			if code != http.StatusForbidden || strings.Contains(body, "RESETLINK") || strings.Contains(body, "password-reset") ||
				strings.Contains(body, `name="csrf"`) || !strings.Contains(body, "--ui-token") {
				t.Errorf("GET %s with Host %s: %d, want 403 and nothing of the page\n%.300s", path, host, code, body)
			}
		}
		for _, action := range []string{"cancel", "retry"} {
			code, body := h.do("POST", "/outbox/"+action, url.Values{"key": {key}, "csrf": {token}}, origin...)
			if code != http.StatusForbidden {
				t.Errorf("POST /outbox/%s with Host %s: %d, want 403\n%.300s", action, host, code, body)
			}
		}
	}
	if rec := h.get(key); rec.State != outbox.StatePending {
		t.Fatalf("after the forged requests the intent is %s, want pending", rec.State)
	}
	if logs := h.logs.String(); strings.Contains(logs, "canceled") {
		t.Errorf("an action was logged:\n%s", logs)
	}

	// The operator's own browser, on a loopback name, reads and cancels.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		code, body := h.do("GET", "/outbox/intent?key="+url.QueryEscape(key), nil, "Host", host)
		if code != 200 || !strings.Contains(body, "RESETLINK") {
			t.Errorf("GET the intent with Host %s: %d\n%.300s", host, code, body)
		}
	}
	host := "localhost:" + port
	code, body := h.do("POST", "/outbox/cancel", url.Values{"key": {key}, "csrf": {token}},
		"Host", host, "Origin", "http://"+host, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusSeeOther {
		t.Fatalf("cancel with Host %s: %d %.300s", host, code, body)
	}
	if rec := h.get(key); rec.State != outbox.StateCanceled {
		t.Errorf("after the operator's cancel the intent is %s, want canceled", rec.State)
	}
}

// TestForeignHostWithToken: with a token the Host is not checked (a proxy
// or a DNS name may front the listener); the token decides, as before.
func TestForeignHostWithToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{actions: true, token: "ops:s3cret-o", auth: "Bearer s3cret-o"})
	h.enqueue(outbox.Intent{Key: "welcome:host", Payload: email("ada@example.com", "Hi"), SendAt: time.Now().Add(time.Hour)})
	host := "sendonce.ops.example"
	code, body := h.do("GET", "/outbox/intent?key=welcome:host", nil, "Host", host)
	if code != 200 || !strings.Contains(body, "welcome:host") {
		t.Fatalf("GET with the token and Host %s: %d\n%.300s", host, code, body)
	}
	token := h.csrf("cancel", "welcome:host")
	code, body = h.do("POST", "/outbox/cancel", url.Values{"key": {"welcome:host"}, "csrf": {token}},
		"Host", host, "Origin", "https://"+host, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusSeeOther {
		t.Fatalf("cancel with the token and Host %s: %d %.300s", host, code, body)
	}
	if rec := h.get("welcome:host"); rec.State != outbox.StateCanceled {
		t.Errorf("the intent is %s, want canceled", rec.State)
	}
	h.auth = ""
	if code, _ := h.do("GET", "/outbox/", nil, "Host", host); code != http.StatusUnauthorized {
		t.Errorf("GET with Host %s and no token: %d, want 401", host, code)
	}
}
