package fakeapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestListEmailsPaginates(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	var sent []string
	for i := range 5 {
		r := do(t, url, http.MethodPost, "/emails", email(fmt.Sprintf("u%d@example.com", i)), nil)
		sent = append(sent, r.body["id"].(string))
	}
	var got []string
	path := "/emails?limit=2"
	for pages := 0; ; pages++ {
		r := do(t, url, http.MethodGet, path, nil, nil)
		wantStatus(t, r, http.StatusOK)
		for _, item := range r.body["data"].([]any) {
			got = append(got, item.(map[string]any)["id"].(string))
		}
		if r.body["hasMore"] == false {
			if r.body["nextCursor"] != nil || pages != 2 {
				t.Fatalf("last page %s after %d pages", r.raw, pages)
			}
			break
		}
		path = "/emails?limit=2&cursor=" + r.body["nextCursor"].(string)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{sent[4], sent[3], sent[2], sent[1], sent[0]}) {
		t.Fatalf("listed %v, sent %v (want newest first)", got, sent)
	}

	r := do(t, url, http.MethodGet, "/emails?status=scheduled,cancelled", nil, nil)
	if string(r.raw) != `{"data":[],"hasMore":false,"nextCursor":null}` {
		t.Fatalf("empty filter answered %s", r.raw)
	}
	wantError(t, do(t, url, http.MethodGet, "/emails?status=lost", nil, nil), http.StatusUnprocessableEntity, "validation_error", "invalid_field", "status")
	wantError(t, do(t, url, http.MethodGet, "/emails?limit=0", nil, nil), http.StatusUnprocessableEntity, "validation_error", "invalid_field", "limit")
	wantError(t, do(t, url, http.MethodGet, "/emails?limit=101", nil, nil), http.StatusUnprocessableEntity, "validation_error", "invalid_field", "limit")
	wantError(t, do(t, url, http.MethodGet, "/emails?cursor=abc", nil, nil), http.StatusBadRequest, "invalid_request_error", "invalid_cursor", "cursor")
}
