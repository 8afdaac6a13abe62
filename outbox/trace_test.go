package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// spanCtx is a context carrying the span context of a caller's span.
func spanCtx(t *testing.T, state string) context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	}))
}

const wantParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestEnqueueStoresTraceContext: the intents of Enqueue, EnqueueMany and
// EnqueueRun carry the W3C trace context of the caller's span; without a
// span they carry none, and an over-long tracestate is dropped, not an error.
func TestEnqueueStoresTraceContext(t *testing.T) {
	t.Parallel()
	pool, ob := setup(t)
	in := func(key string) outbox.Intent {
		return outbox.Intent{Key: key, Payload: json.RawMessage(`{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}`)}
	}
	enqueueIn := func(ctx context.Context, f func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, f); err != nil {
			t.Fatal(err)
		}
	}
	ctx := spanCtx(t, "vendor=abc,other=1")
	enqueueIn(ctx, func(tx pgx.Tx) error { _, err := ob.Enqueue(ctx, tx, in("one")); return err })
	enqueueIn(ctx, func(tx pgx.Tx) error {
		_, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{in("m1"), in("m2")})
		return err
	})
	enqueueIn(ctx, func(tx pgx.Tx) error {
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "run:1", Intents: []outbox.Intent{in("r1")}})
		return err
	})
	for _, key := range []string{"one", "m1", "m2", "r1"} {
		rec := outboxtest.Get(t, ob, key)
		if rec.TraceParent != wantParent || rec.TraceState != "vendor=abc,other=1" {
			t.Errorf("%s: traceparent %q tracestate %q, want %q and the caller's state", key, rec.TraceParent, rec.TraceState, wantParent)
		}
	}

	bg := context.Background()
	enqueueIn(bg, func(tx pgx.Tx) error { _, err := ob.Enqueue(bg, tx, in("untraced")); return err })
	if rec := outboxtest.Get(t, ob, "untraced"); rec.TraceParent != "" || rec.TraceState != "" {
		t.Errorf("untraced: %q %q, want no trace context", rec.TraceParent, rec.TraceState)
	}

	// 32 members of 30 characters: a valid tracestate over 512 characters.
	var members []string
	for i := range 32 {
		members = append(members, "v"+string(rune('a'+i%26))+string(rune('a'+i/26))+"="+strings.Repeat("x", 26))
	}
	long := spanCtx(t, strings.Join(members, ","))
	enqueueIn(long, func(tx pgx.Tx) error { _, err := ob.Enqueue(long, tx, in("long")); return err })
	if rec := outboxtest.Get(t, ob, "long"); rec.TraceParent != wantParent || rec.TraceState != "" {
		t.Errorf("long tracestate: %q %q, want the traceparent and no tracestate", rec.TraceParent, rec.TraceState)
	}
}
