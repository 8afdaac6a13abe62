package fakeapi_test

import (
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	r := do(t, url, http.MethodGet, "/v1/emails", nil, nil)
	wantError(t, r, http.StatusNotFound, "not_found_error", "not_found")
	r = do(t, url, http.MethodDelete, "/emails", nil, nil)
	wantError(t, r, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed")
	if got := r.header.Get("Allow"); got != "POST, GET" {
		t.Errorf("Allow = %q", got)
	}
	r = do(t, url, http.MethodPut, "/emails/em_1", nil, nil)
	wantError(t, r, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed")
	r = do(t, url, http.MethodGet, "/emails/batch", nil, nil)
	wantError(t, r, http.StatusNotFound, "not_found_error", "not_found")
	r = do(t, url, http.MethodGet, "/emails/em_missing", nil, nil)
	wantError(t, r, http.StatusNotFound, "not_found_error", "not_found")
}
