package worker

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sendonce/sendonce/outbox"
)

// TestCrashReplayTraced: a worker killed after the API accepted the send
// leaves a send span with the crash as its error; the next attempt's claim
// is uncertain, and its send span, with one HTTP attempt, is replayed.
// Drained, the claim is made before the send's span starts (for several
// slots at once), so the claim's span is a River job's alone.
func TestCrashReplayTraced(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) { crashReplayTraced(t, p) })
}

func crashReplayTraced(t *testing.T, p path) {
	h := newHarness(t, SendConfig{}).on(p)
	exp := tracetest.NewInMemoryExporter()
	h.worker.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	h.enqueue(outbox.Intent{Key: "invoice:crash", Payload: emailBody("ada@example.com")})
	crash := errors.New("worker killed")
	h.worker.afterSend = func(string) error { return crash }
	if r := h.try("invoice:crash", 1); !errors.Is(r.err, crash) {
		t.Fatalf("first run: %s, want the crash", r)
	}
	h.worker.afterSend = nil
	h.expect(h.try("invoice:crash", 2), "completed", false, "rerun")
	if rec := h.get("invoice:crash"); !rec.Uncertain {
		t.Fatalf("after the rerun: %+v, want its claim uncertain", rec)
	}

	spans := exp.GetSpans()
	var sends []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == spanSend {
			sends = append(sends, s)
		}
	}
	if len(sends) != 2 {
		t.Fatalf("%d send spans, want 2", len(sends))
	}
	if sends[0].Status.Description != "worker killed" {
		t.Errorf("crashed send's status %q, want the crash", sends[0].Status.Description)
	}
	child := func(send tracetest.SpanStub, name string) []map[attribute.Key]any {
		var out []map[attribute.Key]any
		for _, s := range spans {
			if s.Parent.SpanID() == send.SpanContext.SpanID() && s.Name == name {
				m := map[attribute.Key]any{}
				for _, a := range s.Attributes {
					m[a.Key] = a.Value.AsInterface()
				}
				out = append(out, m)
			}
		}
		return out
	}
	claims, posts := child(sends[1], spanClaim), child(sends[1], "POST")
	if p.perJob && (len(claims) != 1 || claims[0][attrUncertain] != true || claims[0][attrAttempt] != int64(2)) {
		t.Errorf("rerun's claim %v, want one, uncertain, attempt 2", claims)
	}
	if len(posts) != 1 || posts[0]["http.response.status_code"] != int64(200) {
		t.Errorf("rerun's HTTP attempts %v, want one 200", posts)
	}
	got := map[attribute.Key]any{}
	for _, a := range sends[1].Attributes {
		got[a.Key] = a.Value.AsInterface()
	}
	if got[attrOutcome] != "sent" || got[attrReplayed] != true || got[attrAttempt] != int64(2) {
		t.Errorf("rerun's send span %v, want sent, replayed, attempt 2", got)
	}
}
