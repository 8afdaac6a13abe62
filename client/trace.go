package client

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the client's spans' instrumentation scope.
const tracerName = "github.com/sendonce/sendonce/client"

// Attributes of an attempt span besides OpenTelemetry's HTTP conventions.
const (
	AttrCall           = attribute.Key("openemail.call")            // the contract's name for the call, "emails.send"
	AttrIdempotencyKey = attribute.Key("openemail.idempotency_key") // the key the attempt carried
	AttrRetry          = attribute.Key("openemail.retry")           // whether another attempt follows
	AttrRetryWait      = attribute.Key("openemail.retry.wait_ms")   // the wait before it, in milliseconds
)

// tracer gives the tracer of the span in ctx, so that the attempts are
// recorded by whatever provider records their parent; without a recording
// parent (none, or only a span context extracted from headers), the global
// one (a no-op unless the program set one).
func tracer(ctx context.Context) trace.Tracer {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return s.TracerProvider().Tracer(tracerName)
	}
	return otel.Tracer(tracerName)
}

// startAttempt starts the span of one HTTP attempt: a client span named by
// the method, with the URL (never its query, which a raw request might use
// for anything), the call and the idempotency key. Never a header: the
// Authorization header holds the API key.
func startAttempt(ctx context.Context, call, method string, u *url.URL, idemKey string, attempt int) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(method),
		semconv.URLFull(u.Scheme + "://" + u.Host + u.EscapedPath()),
		semconv.ServerAddress(u.Hostname()),
		AttrCall.String(call),
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if attempt > 0 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(attempt))
	}
	if idemKey != "" {
		attrs = append(attrs, AttrIdempotencyKey.String(idemKey))
	}
	return tracer(ctx).Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endAttempt ends an attempt's span with its answer (status 0: none came)
// or error, and whether, and after what wait, another attempt follows.
func endAttempt(span trace.Span, status int, err error, retry bool, wait time.Duration) {
	if status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	span.SetAttributes(AttrRetry.Bool(retry))
	if retry {
		span.SetAttributes(AttrRetryWait.Int64(wait.Milliseconds()))
	}
	switch {
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(status, err)))
		span.SetStatus(codes.Error, err.Error())
	case status >= 400:
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

func errorType(status int, err error) string {
	if status != 0 {
		return strconv.Itoa(status)
	}
	if te := (*attemptTimeoutError)(nil); errors.As(err, &te) {
		return "timeout"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
