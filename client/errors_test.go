package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseAPIError(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400)
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   APIError
	}{
		{"full body", 422, nil,
			`{"error":{"type":"validation_error","code":"invalid_recipient","message":"to is invalid","param":"to","docUrl":"https://docs/x","requestId":"req_1","fields":[{"key":"to","error":"bad"},{"key":3,"error":"dropped"}]}}`,
			APIError{Status: 422, Type: "validation_error", Code: "invalid_recipient", Message: "to is invalid", Param: "to", DocURL: "https://docs/x", RequestID: "req_1", Fields: []FieldError{{Key: "to", Error: "bad"}}}},
		{"body type wins over status", 400, nil, `{"error":{"type":"rate_limit_error","code":"slow_down","message":"m"}}`,
			APIError{Status: 400, Type: "rate_limit_error", Code: "slow_down", Message: "m"}},
		{"unknown type falls back to status", 409, nil, `{"error":{"type":"weird","code":"version_conflict","message":"m"}}`,
			APIError{Status: 409, Type: "conflict_error", Code: "version_conflict", Message: "m"}},
		{"no code", 404, nil, `{"error":{"message":"gone"}}`,
			APIError{Status: 404, Type: "not_found_error", Code: "unrecognised_response", Message: "gone"}},
		{"request id from header", 500, http.Header{"X-Request-Id": {"req_h"}}, `{"error":{"message":"m"}}`,
			APIError{Status: 500, Type: "api_error", Code: "unrecognised_response", Message: "m", RequestID: "req_h"}},
		{"body request id beats header", 500, http.Header{"X-Request-Id": {"req_h"}}, `{"error":{"message":"m","requestId":"req_b"}}`,
			APIError{Status: 500, Type: "api_error", Code: "unrecognised_response", Message: "m", RequestID: "req_b"}},
		{"html body", 502, nil, "<html>Bad gateway</html>",
			APIError{Status: 502, Type: "api_error", Code: "unrecognised_response", Message: "<html>Bad gateway</html>"}},
		{"long text body truncated", 400, nil, long,
			APIError{Status: 400, Type: "invalid_request_error", Code: "unrecognised_response", Message: long[:300]}},
		{"empty body", 401, nil, "",
			APIError{Status: 401, Type: "authentication_error", Code: "unrecognised_response", Message: "The API responded 401 with a body this client did not recognise."}},
		{"JSON without error object", 403, nil, `{"message":"nope"}`,
			APIError{Status: 403, Type: "permission_error", Code: "unrecognised_response", Message: `{"message":"nope"}`}},
		{"408 is invalid_request_error", 408, nil, "", APIError{Status: 408, Type: "invalid_request_error", Code: "unrecognised_response", Message: "The API responded 408 with a body this client did not recognise."}},
		{"429", 429, nil, "", APIError{Status: 429, Type: "rate_limit_error", Code: "unrecognised_response", Message: "The API responded 429 with a body this client did not recognise."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			got := parseAPIError(tt.status, h, []byte(tt.body), 0)
			got.Body = nil
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

func TestAPIErrorString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  APIError
		want string
	}{
		{APIError{Status: 422, Type: "validation_error", Code: "validation_error", Message: "message", Param: "to", RequestID: "req_123"},
			`client: 422 validation_error (param "to"): message [request req_123]`},
		{APIError{Status: 422, Type: "validation_error", Code: "idempotency_key_reuse", Message: "key reused"},
			`client: 422 validation_error/idempotency_key_reuse: key reused`},
		{APIError{Status: 503, Type: "api_error", Code: "unavailable", Message: "later", RetryAfter: 2 * time.Minute},
			`client: 503 api_error/unavailable: later (retry after 2m0s)`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	api := func(status int, typ, code string) error {
		return fmt.Errorf("wrapped: %w", &APIError{Status: status, Type: typ, Code: code})
	}
	timeoutErr := &NetworkError{Op: "POST", URL: "u", Err: context.DeadlineExceeded}
	cancelErr := &NetworkError{Op: "POST", URL: "u", Err: context.Canceled}
	keyErr := ValidateIdempotencyKey("bad key")
	tests := []struct {
		name                                              string
		err                                               error
		rateLimited, reuse, invalidKey, notFound, timeout bool
		permanent                                         bool
	}{
		{"400", api(400, TypeInvalidRequest, "x"), false, false, false, false, false, true},
		{"401", api(401, TypeAuthentication, "x"), false, false, false, false, false, true},
		{"404", api(404, TypeNotFound, "x"), false, false, false, true, false, true},
		{"408", api(408, TypeInvalidRequest, "x"), false, false, false, false, false, false},
		{"409", api(409, TypeConflict, "version_conflict"), false, false, false, false, false, true},
		{"422 reuse", api(422, TypeValidation, CodeIdempotencyKeyReuse), false, true, false, false, false, true},
		{"400 invalid key", api(400, TypeInvalidRequest, CodeInvalidIdempotencyKey), false, false, true, false, false, true},
		{"429", api(429, TypeRateLimit, "x"), true, false, false, false, false, false},
		{"500", api(500, TypeAPI, "x"), false, false, false, false, false, false},
		{"503", api(503, TypeAPI, "x"), false, false, false, false, false, false},
		{"200 unrecognised", api(200, TypeAPI, CodeUnrecognisedResponse), false, false, false, false, false, false},
		{"timeout", timeoutErr, false, false, false, false, true, false},
		{"cancel", cancelErr, false, false, false, false, false, false},
		{"client-side key", keyErr, false, false, true, false, false, true},
		{"other", errors.New("x"), false, false, false, false, false, false},
		{"nil", nil, false, false, false, false, false, false},
	}
	for _, tt := range tests {
		got := []bool{IsRateLimited(tt.err), IsIdempotencyKeyReuse(tt.err), IsInvalidIdempotencyKey(tt.err), IsNotFound(tt.err), IsTimeout(tt.err), IsPermanent(tt.err)}
		want := []bool{tt.rateLimited, tt.reuse, tt.invalidKey, tt.notFound, tt.timeout, tt.permanent}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: [rateLimited reuse invalidKey notFound timeout permanent] = %v, want %v", tt.name, got, want)
		}
	}
	if !errors.Is(cancelErr, context.Canceled) {
		t.Error("NetworkError does not unwrap")
	}
}
