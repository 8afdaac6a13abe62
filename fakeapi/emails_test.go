package fakeapi_test

import (
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestGetEmail(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	sent := do(t, url, http.MethodPost, "/emails", with(email("ann@example.com"), "bcc", []string{"audit@example.com"}), nil)
	r := do(t, url, http.MethodGet, "/emails/"+sent.body["id"].(string), nil, nil)
	wantStatus(t, r, http.StatusOK)
	if r.body["id"] != sent.body["id"] || r.body["status"] != "sent" ||
		r.body["bcc"].([]any)[0] != "audit@example.com" {
		t.Fatalf("GET answered %s", r.raw)
	}
	if _, ok := r.body["replayed"]; ok {
		t.Error("a read carries replayed")
	}
}
