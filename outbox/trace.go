package outbox

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// maxTraceState is the longest tracestate stored (the column's check). W3C
// asks vendors to pass on at least 512 characters; a longer one is dropped
// rather than fail the enqueue, and the traceparent still goes in.
const maxTraceState = 512

// traceContext returns the W3C traceparent and tracestate of the span in
// ctx, as OpenTelemetry's propagator writes them into headers, or empty
// strings when ctx carries no valid span context (tracing off, or no span).
func traceContext(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	parent, state = c.Get("traceparent"), c.Get("tracestate")
	if len(state) > maxTraceState {
		state = ""
	}
	return parent, state
}
