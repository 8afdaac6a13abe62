package fakeapi

import (
	"encoding/json"
	"net/http"
)

// The error types the OpenEmail API puts in error.type. Clients choose their
// exception from the type, not from the status, so every error the fake sends
// names one of these.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typeNotFound       = "not_found_error"
	typeConflict       = "conflict_error"
	typeValidation     = "validation_error"
	typeRateLimit      = "rate_limit_error"
	typeAPI            = "api_error"
)

// apiError is one error answer: an HTTP status and the body
// {"error":{"type","code","message","param","requestId"[,"fields"]}}.
type apiError struct {
	status  int
	typ     string
	code    string
	message string
	param   string // "" is sent as null
	fields  []fieldError
}

// fieldError is one item of error.fields, the per-field detail of a
// validation error.
type fieldError struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// body renders the error in the API's shape. requestId is always present so a
// client can report it even when it ignores headers.
func (e *apiError) body(requestID string) []byte {
	var param any
	if e.param != "" {
		param = e.param
	}
	inner := map[string]any{
		"type":      e.typ,
		"code":      e.code,
		"message":   e.message,
		"param":     param,
		"requestId": requestID,
	}
	if len(e.fields) > 0 {
		inner["fields"] = e.fields
	}
	b, _ := json.Marshal(map[string]any{"error": inner})
	return b
}

func newError(status int, typ, code, message string) *apiError {
	return &apiError{status: status, typ: typ, code: code, message: message}
}

// invalidRequest is a 400 for a request the API cannot read at all.
func invalidRequest(code, message string) *apiError {
	return newError(http.StatusBadRequest, typeInvalidRequest, code, message)
}

// invalidField is a 422 validation_error naming the offending parameter, with
// the same detail in error.fields.
func invalidField(param, code, message string) *apiError {
	e := newError(http.StatusUnprocessableEntity, typeValidation, code, message)
	e.param = param
	e.fields = []fieldError{{Key: param, Error: message}}
	return e
}

// missingField is invalidField for a required parameter that is absent.
func missingField(param string) *apiError {
	return invalidField(param, "missing_field", param+" is required.")
}

func notFound(message string) *apiError {
	return newError(http.StatusNotFound, typeNotFound, "not_found", message)
}

// typeForStatus is the error type a status implies; injected faults use it so
// their bodies look like the API's own.
func typeForStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return typeAuthentication
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return typeNotFound
	case status == http.StatusConflict:
		return typeConflict
	case status == http.StatusUnprocessableEntity:
		return typeValidation
	case status == http.StatusTooManyRequests:
		return typeRateLimit
	case status >= 500:
		return typeAPI
	default:
		return typeInvalidRequest
	}
}

// codeForStatus is the error code an injected fault of that status carries.
func codeForStatus(status int) string {
	switch status {
	case http.StatusRequestTimeout:
		return "request_timeout"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case http.StatusInternalServerError:
		return "internal_error"
	case http.StatusBadGateway:
		return "bad_gateway"
	case http.StatusServiceUnavailable:
		return "service_unavailable"
	case http.StatusGatewayTimeout:
		return "gateway_timeout"
	default:
		return "injected_fault"
	}
}
