package fakeapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestMalformedBodies(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	for _, body := range []string{"", "{", `["a"]`, `{"from":"a@b.c"} {}`} {
		r := do(t, url, http.MethodPost, "/emails", body, nil)
		wantError(t, r, http.StatusBadRequest, "invalid_request_error", "invalid_json")
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{MaxBodyBytes: 1024})
	body := email("ann@example.com")
	body["text"] = strings.Repeat("x", 2048)
	r := do(t, url, http.MethodPost, "/emails", body, nil)
	wantError(t, r, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large")
}

func TestStartReportsADialableURL(t *testing.T) {
	t.Parallel()
	srv := fakeapi.New(fakeapi.Config{})
	defer srv.Close()
	url, err := srv.Start("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || url != srv.URL() {
		t.Fatalf("url = %q, URL() = %q", url, srv.URL())
	}
	wantStatus(t, do(t, url, http.MethodGet, "/_fake/health", nil, nil), http.StatusOK)
	if _, err := srv.Start("127.0.0.1:0"); err == nil {
		t.Error("second Start succeeded")
	}
}
