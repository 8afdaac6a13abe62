package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Error types the API puts in error.type. When a body names none of these,
// the type is derived from the HTTP status (see typeForStatus).
const (
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeConflict       = "conflict_error"
	TypeValidation     = "validation_error"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeInvalidRequest = "invalid_request_error"
)

// Error codes this package gives meaning to.
const (
	// CodeIdempotencyKeyReuse is the code of the 422 the API answers when a key
	// is reused with a different body. It is never a silent replay.
	CodeIdempotencyKeyReuse = "idempotency_key_reuse"
	// CodeInvalidIdempotencyKey is the code of the 400 the API answers for a key
	// outside 1–255 characters of [A-Za-z0-9_.:-]. This client refuses such a
	// key itself with an *IdempotencyKeyError carrying the same code.
	CodeInvalidIdempotencyKey = "invalid_idempotency_key"
	// CodeUnrecognisedResponse is made by this client when a response body is
	// not the JSON it expects (an error body without an error object, or a
	// 2xx body that is not JSON).
	CodeUnrecognisedResponse = "unrecognised_response"
)

// Sentinel errors for mistakes caught before anything is sent. They are
// wrapped with context; test with errors.Is.
var (
	// ErrNoCredential is returned by New when neither WithAPIKey nor
	// OPENEMAIL_API_KEY provides an API key.
	ErrNoCredential = errors.New("client: no API key (use WithAPIKey or set OPENEMAIL_API_KEY)")
	// ErrInvalidAPIKey is returned by New for a key that does not start with
	// oe_live_ or oe_test_. The key itself is never part of the message.
	ErrInvalidAPIKey = errors.New("client: invalid API key")
	// ErrInvalidBaseURL is returned by New for a base URL it cannot use.
	ErrInvalidBaseURL = errors.New("client: invalid base URL")
	// ErrInsecureBaseURL is returned by a call whose request would carry the
	// API key over plain http to a host that is not loopback. Nothing is sent.
	ErrInsecureBaseURL = errors.New("client: refusing to send the API key over plain http to a non-loopback host")
	// ErrInvalidRequest is returned for a request this client refuses to
	// build: an empty or all-dots id, a malformed path, a body that cannot be
	// encoded, an unknown call name.
	ErrInvalidRequest = errors.New("client: invalid request")
)

// FieldError is one entry of error.fields: which input key was wrong and why.
type FieldError struct {
	// Key names the input field.
	Key string `json:"key"`
	// Error says what is wrong with it.
	Error string `json:"error"`
}

// APIError is a response from the API that was not a success: any status
// outside 200–299, or a 2xx whose body is not JSON (Type api_error, Code
// unrecognised_response). Reach it with errors.As.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Type is error.type when it is one of the eight known types, otherwise
	// the type for Status (401 authentication_error, 403 permission_error, 404
	// not_found_error, 409 conflict_error, 422 validation_error, 429
	// rate_limit_error, 5xx api_error, anything else invalid_request_error).
	Type string
	// Code is error.code, or unrecognised_response when the body has none.
	Code string
	// Message is error.message, or the start of the body, or a sentence
	// saying the body was not recognised.
	Message string
	// Param names the input the error is about, when the API says.
	Param string
	// RequestID is error.requestId, else the x-request-id response header.
	RequestID string
	// DocURL is error.docUrl.
	DocURL string
	// Fields lists per-field validation errors.
	Fields []FieldError
	// RetryAfter is the response's Retry-After, parsed, for any status. It is
	// zero when the header is absent (or says 0). When it is over a minute
	// the client did not retry: a server asking for that long is asking the
	// client to stop, and coming back earlier would not follow the instruction.
	RetryAfter time.Duration
	// RateLimit is what the response's rate-limit headers said (see
	// RateInfo); nil when it carried none.
	RateLimit *RateInfo
	// Body is the whole response body as received (nil when empty).
	Body json.RawMessage
	// Uncertain reports that an earlier attempt of the same call ended
	// without a known outcome (a network failure, a timeout, a 5xx), so
	// the request may have been delivered although this answer refuses
	// it: a 400 or 422 on a retry (from a proxy, or after a validation
	// change) says nothing of the attempt before it. Such a send must not
	// be sent again under another key. See [MayHaveBeenDelivered].
	Uncertain bool
}

// Error reads like
//
//	client: 422 validation_error (param "to"): message [request req_123]
//
// with "/code" after the type when the code says more than the type.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %d %s", e.Status, e.Type)
	if e.Code != "" && e.Code != e.Type {
		b.WriteString("/" + e.Code)
	}
	if e.Param != "" {
		fmt.Fprintf(&b, " (param %q)", e.Param)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", e.RequestID)
	}
	return b.String()
}

// NetworkError means no response was received: the connection failed, an
// attempt timed out, or the caller's context was cancelled or expired. When
// the call was repeatable, the client had already retried as far as it could
// (a cancelled context is never retried). A send that ends in a NetworkError
// may or may not have gone out; retrying it with the same idempotency key is
// safe and replays it if it did.
type NetworkError struct {
	// Op is the HTTP method of the request.
	Op string
	// URL is the request URL without query. It never holds a credential: the
	// API key travels only in the Authorization header and base URLs with
	// user information are refused.
	URL string
	// Err is the underlying failure; for cancellation it wraps ctx.Err().
	Err error
	// Uncertain reports that an earlier attempt of the same call ended
	// without a known outcome (a network failure after the connection was
	// made, a 5xx), so the request may have been delivered even when this
	// failure came before any byte of it left (a refused connection, a DNS
	// failure). See [MayHaveBeenDelivered].
	Uncertain bool

	// msg, when set, is Err's text with the API key removed: errors from
	// http.RoundTrippers are not ours, so the transport scrubs them.
	msg string
}

// Error reports the method, URL and cause.
func (e *NetworkError) Error() string {
	cause := e.msg
	if cause == "" && e.Err != nil {
		cause = causeText(e.Err)
	}
	return fmt.Sprintf("client: %s %s: %s", e.Op, e.URL, cause)
}

// Unwrap returns the underlying failure, so errors.Is(err, context.Canceled)
// and errors.Is(err, context.DeadlineExceeded) work.
func (e *NetworkError) Unwrap() error { return e.Err }

// Timeout reports whether the failure was a timeout: the per-attempt timeout
// (WithTimeout), the caller's context deadline, or a net.Error timeout.
func (e *NetworkError) Timeout() bool {
	if errors.Is(e.Err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// causeText drops the *url.Error wrapper, whose text repeats the method and
// URL that NetworkError.Error already prints.
func causeText(err error) string {
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}

// attemptTimeoutError says that the per-attempt timeout (WithTimeout), not
// the caller's context, ended an attempt; "context deadline exceeded" alone
// would not say which.
type attemptTimeoutError struct {
	timeout time.Duration
	err     error
}

// Error names the timeout and the failure it caused.
func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("attempt timed out after %s: %s", e.timeout, causeText(e.err))
}

// Unwrap returns the transport's error, which wraps
// context.DeadlineExceeded.
func (e *attemptTimeoutError) Unwrap() error { return e.err }

// Timeout reports true, for net.Error-style checks.
func (e *attemptTimeoutError) Timeout() bool { return true }

// IdempotencyKeyError is returned, before anything is sent, for a caller's
// key the API would refuse with 400 invalid_idempotency_key. Its Code is
// always CodeInvalidIdempotencyKey. It is deliberately not an *APIError: no
// response was received. Test for either form with IsInvalidIdempotencyKey.
type IdempotencyKeyError struct {
	// Code is always CodeInvalidIdempotencyKey.
	Code string
	// Reason says what is wrong, without repeating the key.
	Reason string
}

// Error describes the problem.
func (e *IdempotencyKeyError) Error() string {
	return "client: " + CodeInvalidIdempotencyKey + ": " + e.Reason
}

// IsRateLimited reports whether err is an API 429 (or rate_limit_error).
// This API sends no Retry-After on 429, so the client raises it at once; back
// off in the caller's own schedule.
func IsRateLimited(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Status == http.StatusTooManyRequests || e.Type == TypeRateLimit)
}

// IsIdempotencyKeyReuse reports whether err is the API refusing a key that was
// used before with a different body (code idempotency_key_reuse, a 422).
// Retrying the same body with that key will not help; this is a bug in how
// the key or the body is derived.
func IsIdempotencyKeyReuse(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == CodeIdempotencyKeyReuse
}

// IsInvalidIdempotencyKey reports whether err is this client refusing a
// caller's key (*IdempotencyKeyError) or the API doing so (an *APIError with
// code invalid_idempotency_key).
func IsInvalidIdempotencyKey(err error) bool {
	var ke *IdempotencyKeyError
	if errors.As(err, &ke) {
		return true
	}
	var e *APIError
	return errors.As(err, &e) && e.Code == CodeInvalidIdempotencyKey
}

// IsNotFound reports whether err is an API 404 (or not_found_error).
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Status == http.StatusNotFound || e.Type == TypeNotFound)
}

// IsTimeout reports whether err is a NetworkError caused by a timeout or an
// expired context deadline.
func IsTimeout(err error) bool {
	var e *NetworkError
	return errors.As(err, &e) && e.Timeout()
}

// IsPermanent reports whether err is a failure that repeating the same
// request cannot fix: an API error with a 4xx status other than 408 and 429,
// or a caller key this client refused (*IdempotencyKeyError).
//
// It is false for network errors, 408, 429 and 5xx (a later attempt may
// succeed, and a send retried with the same key replays rather than repeats),
// and for a 2xx whose body was not recognised (the work may have been done).
// A 5xx that carried Retry-After over a minute is not permanent either: the
// server asked for a later attempt; APIError.RetryAfter says when.
func IsPermanent(err error) bool {
	var ke *IdempotencyKeyError
	if errors.As(err, &ke) {
		return true
	}
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	return e.Status >= 400 && e.Status < 500 &&
		e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// knownTypes are the error types the API defines; any other error.type falls
// back to the type for the status.
var knownTypes = map[string]bool{
	TypeAuthentication: true, TypePermission: true, TypeNotFound: true, TypeConflict: true,
	TypeValidation: true, TypeRateLimit: true, TypeAPI: true, TypeInvalidRequest: true,
}

// typeByStatus is the API's type for a status when the body names none;
// any other status is api_error from 500 up and invalid_request_error below.
var typeByStatus = map[int]string{
	http.StatusUnauthorized:        TypeAuthentication,
	http.StatusForbidden:           TypePermission,
	http.StatusNotFound:            TypeNotFound,
	http.StatusConflict:            TypeConflict,
	http.StatusUnprocessableEntity: TypeValidation,
	http.StatusTooManyRequests:     TypeRateLimit,
}

func typeForStatus(status int) string {
	switch t, ok := typeByStatus[status]; {
	case ok:
		return t
	case status >= 500:
		return TypeAPI
	}
	return TypeInvalidRequest
}

// maxMessageFromBody bounds how much of an unrecognised body becomes the
// message, as the official SDKs do.
const maxMessageFromBody = 300

// parseAPIError builds an APIError from a non-2xx response, with the
// fallbacks of the official SDKs for every field the body does not give.
func parseAPIError(status int, header http.Header, body []byte, retryAfter time.Duration) *APIError {
	e := &APIError{Status: status, RetryAfter: retryAfter}
	if json.Valid(body) {
		e.Body = body
	}
	m, _ := decodeResponse(body)
	ee := field[map[string]json.RawMessage](m, "error")
	if t := field[string](ee, "type"); knownTypes[t] {
		e.Type = t
	}
	e.Code, e.Message, e.Param = field[string](ee, "code"), field[string](ee, "message"), field[string](ee, "param")
	e.DocURL, e.RequestID = field[string](ee, "docUrl"), field[string](ee, "requestId")
	for _, f := range field[[]map[string]json.RawMessage](ee, "fields") {
		if k, msg := field[*string](f, "key"), field[*string](f, "error"); k != nil && msg != nil {
			e.Fields = append(e.Fields, FieldError{Key: *k, Error: *msg})
		}
	}

	if e.Type == "" {
		e.Type = typeForStatus(status)
	}
	if e.Code == "" {
		e.Code = CodeUnrecognisedResponse
	}
	if e.Message == "" {
		if text := strings.TrimSpace(string(body)); text != "" && ee == nil {
			e.Message = truncateRunes(text, maxMessageFromBody)
		} else {
			e.Message = fmt.Sprintf("The API responded %d with a body this client did not recognise.", status)
		}
	}
	if e.RequestID == "" {
		e.RequestID = header.Get("X-Request-Id")
	}
	return e
}

// unrecognisedSuccess is the error for a 2xx whose body is not JSON. It is not
// retried: the request may well have done its work.
func unrecognisedSuccess(status int, header http.Header, body []byte) *APIError {
	return &APIError{
		Status:    status,
		Type:      TypeAPI,
		Code:      CodeUnrecognisedResponse,
		Message:   fmt.Sprintf("The API responded %d with a body that is not JSON.", status),
		RequestID: header.Get("X-Request-Id"),
	}
}

func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// MayHaveBeenDelivered reports whether a send that returned err may
// nevertheless have been delivered: a network failure or a timeout (the
// request may have reached the API), a 5xx, or any refusal or failure that
// followed such an attempt of the same call ([APIError.Uncertain],
// [NetworkError.Uncertain]). A network failure that came before any byte of
// the request left (the connection was refused or never made, a DNS
// failure) did not deliver it, unless an earlier attempt of the call may
// have. A caller must not send such a request again under another
// idempotency key; the same key replays it if it was delivered. Any other
// error means the API took nothing.
func MayHaveBeenDelivered(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Uncertain || apiErr.Status >= 500 || (apiErr.Status >= 200 && apiErr.Status <= 299)
	}
	var netErr *NetworkError
	return errors.As(err, &netErr) && (netErr.Uncertain || !neverSent(netErr.Err))
}

// neverSent reports a network failure that happened before any byte of the
// request left: the connection was never made (refused, no route, a DNS
// failure), so the API cannot have seen the request.
func neverSent(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}
