package outboxui_test

import (
	"strings"
	"testing"
)

// TestUnsubscribesByTopic: the overview shows each topic's unsubscribes.
func TestUnsubscribesByTopic(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	if code, body := h.do("GET", "/outbox/", nil); code != 200 || !strings.Contains(body, "No unsubscribes.") {
		t.Fatalf("overview before: %d", code)
	}
	for _, u := range [][2]string{{"ada@example.com", "digest"}, {"bob@example.com", "digest"}, {"ada@example.com", "product-news"}} {
		if _, err := h.ob.Unsubscribe(h.ctx, u[0], u[1], "test"); err != nil {
			t.Fatal(err)
		}
	}
	code, body := h.do("GET", "/outbox/", nil)
	for _, want := range []string{
		`<tr><td><code>digest</code></td><td class="num">2</td><td class="num">2</td></tr>`,
		`<tr><td><code>product-news</code></td><td class="num">1</td><td class="num">1</td></tr>`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("overview (%d) lacks %q", code, want)
		}
	}
}
