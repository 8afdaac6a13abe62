package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// tracerName names the worker's spans' instrumentation scope.
const tracerName = "github.com/sendonce/sendonce/worker"

// The worker's spans. A send span is a child of River's job span (from
// River's OpenTelemetry middleware) and links to the span that enqueued the
// intent; its children are the claim and the client's HTTP attempts.
const (
	spanSend      = "sendonce.send"
	spanSendBatch = "sendonce.send_batch"
	spanClaim     = "sendonce.claim"
)

// Attributes of the worker's spans.
const (
	attrKey       = attribute.Key("sendonce.key")        // the intent's idempotency key (a batch's own key)
	attrKind      = attribute.Key("sendonce.kind")       // email, batch, template, broadcast
	attrJobID     = attribute.Key("sendonce.job_id")     // the River job
	attrAttempt   = attribute.Key("sendonce.attempt")    // the intent's attempt, counted by the claim
	attrClaimed   = attribute.Key("sendonce.claimed")    // whether the claim gave this job the send
	attrOutcome   = attribute.Key("sendonce.outcome")    // sent, failed, pending, snoozed, skipped, coalesced, split, suppressed
	attrMessageID = attribute.Key("sendonce.message_id") // the API's message id (ids, comma-separated, for a batch kind)
	attrReplayed  = attribute.Key("sendonce.replayed")   // the API answered from its idempotency store
	attrUncertain = attribute.Key("sendonce.uncertain")  // an attempt's outcome is unknown: the API may hold a delivery
	attrReason    = attribute.Key("sendonce.reason")     // why it failed or waits (as in last_error)
	attrBatchKey  = attribute.Key("sendonce.batch_key")  // the coalesced batch
	attrMembers   = attribute.Key("sendonce.batch.members")
	attrSent      = attribute.Key("sendonce.batch.sent")
	attrFailed    = attribute.Key("sendonce.batch.failed")
	attrLinksLeft = attribute.Key("sendonce.batch.links_dropped") // members past maxBatchLinks, not linked
)

// maxBatchLinks caps the links of a batch's span to its members' enqueuers
// (a batch has at most MaxCoalesce members, so today it never bites).
const maxBatchLinks = 100

// enqueuerLink is the link from a send's span to the span that enqueued the
// intent, from the stored W3C trace context; false when none was stored or
// it does not parse.
func enqueuerLink(parent, state string) (trace.Link, bool) {
	if parent == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": parent, "tracestate": state})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("sendonce.link", "enqueue")}}, true
}

// startClaim starts the claim's span.
func (w *sendWorker) startClaim(ctx context.Context) (context.Context, trace.Span) {
	return w.tracer.Start(ctx, spanClaim)
}

// endClaim ends a claim's span with what the claim found.
func endClaim(span trace.Span, ok bool, attempt int, uncertain bool, err error) {
	span.SetAttributes(attrClaimed.Bool(ok))
	if ok {
		span.SetAttributes(attrAttempt.Int(attempt), attrUncertain.Bool(uncertain))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// endSend ends a send's span. An error returned to River marks it failed,
// unless it is a snooze or a cancel, whose outcome the span already holds.
func endSend(span trace.Span, err error) {
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	if err != nil && !errors.As(err, &snooze) && !errors.As(err, &cancel) {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// note records the attempt's outcome on its span.
func (a *attempt) note(outcome string, attrs ...attribute.KeyValue) {
	if a.span == nil {
		return
	}
	a.span.SetAttributes(attrOutcome.String(outcome))
	a.span.SetAttributes(attrs...)
}

// linkMembers links a batch's span to the spans that enqueued its members,
// at most maxBatchLinks of them. It reads their trace context only when
// the span is recorded.
func (bw *batchWorker) linkMembers(ctx context.Context, span trace.Span, b *sendstate.Batch) error {
	if !span.IsRecording() {
		return nil
	}
	tcs, err := store.WorkerTraceContexts(ctx, bw.w.pool, b.Members)
	if err != nil {
		return fmt.Errorf("worker: read the trace context of batch %s: %w", b.Key, err)
	}
	linked, dropped := 0, 0
	for _, tc := range tcs {
		l, ok := enqueuerLink(tc.Parent, tc.State)
		switch {
		case !ok:
		case linked >= maxBatchLinks:
			dropped++
		default:
			span.AddLink(l)
			linked++
		}
	}
	if dropped > 0 {
		span.SetAttributes(attrLinksLeft.Int(dropped))
	}
	return nil
}
