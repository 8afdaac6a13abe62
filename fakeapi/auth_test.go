package fakeapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	cases := []struct {
		name, authorization, code string
	}{
		{"missing", "", "missing_api_key"},
		{"not bearer", "Basic " + testKey, "invalid_authorization_header"},
		{"unknown prefix", "Bearer sk_test_123", "invalid_api_key"},
		{"prefix only", "Bearer oe_test_", "invalid_api_key"},
		{"access token", "Bearer eyJhbGciOi", "invalid_api_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), headers("Authorization", tc.authorization))
			wantError(t, r, http.StatusUnauthorized, "authentication_error", tc.code)
			if r.errorField("param") != nil {
				t.Errorf("param = %v, want null", r.errorField("param"))
			}
			if !strings.HasPrefix(r.header.Get("x-request-id"), "req_") {
				t.Errorf("x-request-id = %q", r.header.Get("x-request-id"))
			}
		})
	}
	for _, key := range []string{"oe_test_abc", "oe_live_abc"} {
		r := do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "Bearer "+key))
		wantStatus(t, r, http.StatusOK)
		if r.header.Get("x-request-id") == "" {
			t.Error("a success carries no x-request-id")
		}
	}
}

func TestAuthenticationWithKeyList(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{APIKeys: []string{"oe_live_allowed"}})
	r := do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "Bearer oe_test_other"))
	wantError(t, r, http.StatusUnauthorized, "authentication_error", "invalid_api_key")
	r = do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "Bearer oe_live_allowed"))
	wantStatus(t, r, http.StatusOK)
}
