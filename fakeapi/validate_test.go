package fakeapi_test

import (
	"maps"
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

// with returns a copy of an email body with changes; a nil value deletes.
func with(body map[string]any, kv ...any) map[string]any {
	out := maps.Clone(body)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func TestValidation(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	ok := email("ann@example.com")
	broadcast := map[string]any{"from": "news@example.com", "audienceId": "aud_1", "subject": "News", "html": "<p>hi</p>"}
	cases := []struct {
		name, path string
		body       map[string]any
		param      string
	}{
		{"no from", "/emails", with(ok, "from", nil), "from"},
		{"bad from", "/emails", with(ok, "from", "not an address"), "from"},
		{"no to", "/emails", with(ok, "to", nil), "to"},
		{"empty to", "/emails", with(ok, "to", []string{}), "to"},
		{"bare string to", "/emails", with(ok, "to", "ann@example.com"), "to"},
		{"bare string cc", "/emails", with(ok, "cc", "bob@example.com"), "cc"},
		{"bad address", "/emails", with(ok, "to", []string{"ann@example.com", "bob"}), "to[1]"},
		{"no content", "/emails", with(ok, "text", nil), "html"},
		{"html not a string", "/emails", with(ok, "html", 3), "html"},
		{"bad scheduledAt", "/emails", with(ok, "scheduledAt", "tomorrow"), "scheduledAt"},
		{"headers as array", "/emails", with(ok, "headers", []string{}), "headers"},
		{"template props as array", "/emails", with(ok, "template", map[string]any{"id": "t", "props": []string{}}), "template.props"},
		{"attachment not base64", "/emails", with(ok, "attachments", []any{map[string]any{"filename": "a.pdf", "content": "%%%"}}), "attachments[0].content"},
		{"batch without emails", "/emails/batch", map[string]any{}, "emails"},
		{"batch empty", "/emails/batch", map[string]any{"emails": []any{}}, "emails"},
		{"batch item without to", "/emails/batch", map[string]any{"emails": []any{ok, with(ok, "to", nil)}}, "emails[1].to"},
		{"template without from", "/templates/welcome/send", with(ok, "from", nil, "text", nil), "from"},
		{"template without to", "/templates/welcome/send", with(ok, "to", nil), "to"},
		{"template props as array", "/templates/welcome/send", with(ok, "props", []any{}), "props"},
		{"broadcast without audience", "/broadcasts", with(broadcast, "audienceId", nil), "audienceId"},
		{"broadcast without subject", "/broadcasts", with(broadcast, "subject", nil), "subject"},
		{"broadcast without content", "/broadcasts", with(broadcast, "html", nil), "html"},
		{"broadcast without from", "/broadcasts", with(broadcast, "from", nil), "from"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, url, http.MethodPost, tc.path, tc.body, nil)
			wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "", tc.param)
			fields, _ := r.errorField("fields").([]any)
			if len(fields) != 1 || fields[0].(map[string]any)["key"] != tc.param {
				t.Errorf("fields = %v, want one for %s", r.errorField("fields"), tc.param)
			}
		})
	}
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("invalid sends delivered %d messages", n)
	}

	valid := []struct {
		name, path string
		body       map[string]any
	}{
		{"display name and cc", "/emails", with(ok, "to", []string{"Ann <ann@example.com>"}, "cc", []string{"bob@example.com"})},
		{"html only", "/emails", with(ok, "text", nil, "html", "<p>hi</p>")},
		{"draft", "/emails", with(ok, "text", nil, "draftId", "dr_1")},
		{"template object", "/emails", with(ok, "text", nil, "template", map[string]any{"id": "t_1", "props": map[string]any{}})},
		{"attachments", "/emails", with(ok, "attachments", []any{map[string]any{"fileId": "f_1"}, map[string]any{"filename": "a.txt", "content": "aGVsbG8="}})},
		{"template send without content", "/templates/welcome/send", with(ok, "text", nil, "subject", nil)},
		{"broadcast with audienceIds", "/broadcasts", with(broadcast, "audienceId", nil, "audienceIds", []string{"a", "b"})},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, do(t, url, http.MethodPost, tc.path, tc.body, nil), http.StatusOK)
		})
	}
}
