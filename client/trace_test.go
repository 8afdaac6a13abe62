package client

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Each HTTP attempt is a client span under the caller's span, with the
// status, whether it is retried and after what wait, and the idempotency
// key; nothing of the Authorization header or the API key, even when the
// server echoes the key back.
func TestAttemptSpans(t *testing.T) {
	t.Parallel()
	echo := respond(503, `{"error":{"type":"api_error","code":"unavailable","message":"bad key `+testAPIKey+`"}}`)
	api := newFakeAPI(t, echo, okEmail)
	c, sleeps := newTestClient(t, api.URL)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "send")
	if _, err := c.Emails.Send(ctx, sampleEmail(), WithIdempotencyKey("invoice:1")); err != nil {
		t.Fatal(err)
	}
	parent.End()

	var attempts tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.Name == "POST" {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	want := []map[attribute.Key]any{
		{"http.response.status_code": int64(503), "openemail.retry": true, "openemail.retry.wait_ms": sleeps.recorded()[0].Milliseconds(),
			"openemail.idempotency_key": "invoice:1", "openemail.call": "emails.send", "http.request.method": "POST", "error.type": "503"},
		{"http.response.status_code": int64(200), "openemail.retry": false, "http.request.resend_count": int64(1),
			"openemail.idempotency_key": "invoice:1"},
	}
	for i, s := range attempts {
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("attempt %d: parent %s, want the caller's span", i+1, s.Parent.SpanID())
		}
		got := map[attribute.Key]any{}
		for _, a := range s.Attributes {
			got[a.Key] = a.Value.AsInterface()
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("attempt %d: %s = %v, want %v", i+1, k, got[k], v)
			}
		}
		texts := []string{s.Status.Description}
		for _, a := range s.Attributes {
			texts = append(texts, string(a.Key), a.Value.Emit())
		}
		for _, text := range texts {
			if strings.Contains(text, testAPIKey) || strings.Contains(strings.ToLower(text), "bearer") || strings.Contains(strings.ToLower(text), "authorization") {
				t.Errorf("attempt %d holds a secret: %q", i+1, text)
			}
		}
	}
	if !strings.Contains(attempts[0].Status.Description, "bad key") {
		t.Errorf("first attempt's status %q, want the API's (redacted) message", attempts[0].Status.Description)
	}
}
