package client

import (
	"context"
	"testing"
)

func TestTemplatesSend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		idOrSlug string
		params   *TemplateSendParams
		wantURI  string
		wantBody string
	}{
		{"tpl_123", &TemplateSendParams{To: Recipients{"a@x.io"}}, "/templates/tpl_123/send", `{"to":["a@x.io"]}`},
		{"welcome/de", &TemplateSendParams{To: Recipients{"a@x.io"}, Props: map[string]any{}, Slots: map[string]any{"hero": "<b>x</b>"}},
			"/templates/welcome%2Fde/send", `{"props":{},"slots":{"hero":"\u003cb\u003ex\u003c/b\u003e"},"to":["a@x.io"]}`},
	}
	for _, tt := range tests {
		api := newFakeAPI(t, respond(200, `{"id":"em_9","status":"queued"}`))
		c, _ := newTestClient(t, api.URL)
		e, err := c.Templates.Send(context.Background(), tt.idOrSlug, tt.params)
		if err != nil || e.ID != "em_9" {
			t.Fatalf("%s: %v, %v", tt.idOrSlug, e, err)
		}
		r := api.requests()[0]
		if r.RequestURI != tt.wantURI || string(r.Body) != tt.wantBody || r.Header.Get("Idempotency-Key") == "" {
			t.Errorf("got %s %s key=%q; want %s %s", r.RequestURI, r.Body, r.Header.Get("Idempotency-Key"), tt.wantURI, tt.wantBody)
		}
	}
}
