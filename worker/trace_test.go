package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

const traceAPIKey = "oe_test_tracesecret000000"

// TestSendSpanTree enqueues an intent inside a span, lets a worker send it
// through a fake API that answers 500 once, and checks the spans: the send
// span links to the enqueuer's span; it has one child per HTTP attempt
// (the 500 that is retried after a wait, then the 200), and the outcome as
// attributes. Sent by a River job of its own (as a database upgraded from
// a release before the drain holds: outboxtest.GiveJobs), the send span is
// a child of River's job span and has a claim child; drained, it is the
// root of a trace of its own (the drain's claim is made for several slots
// at once, before any send's span). With the answer lost after the fake
// had sent (error_after), the second attempt is replayed, and the span
// says so. No span holds the API key.
func TestSendSpanTree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fault    fakeapi.FaultKind
		replayed bool
		perJob   bool
	}{
		{"retried", fakeapi.FaultErrorBefore, false, false},
		{"replayed", fakeapi.FaultErrorAfter, true, false},
		{"retried/own job", fakeapi.FaultErrorBefore, false, true},
		{"replayed/own job", fakeapi.FaultErrorAfter, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			pool, ob := outboxtest.New(t)
			fake := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{traceAPIKey},
				Faults: []fakeapi.Fault{{Kind: tc.fault, Status: 500, Times: 1}}})
			c, err := client.New(client.WithAPIKey(traceAPIKey), client.WithBaseURL(fake.URL()),
				client.WithSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
			if err != nil {
				t.Fatal(err)
			}
			exp := tracetest.NewInMemoryExporter()
			ended := endedSpans(make(chan string, 100))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ended))
			cfg := &worker.Config{Client: c, TracerProvider: tp, Concurrency: 1}

			// The application's request: its span is the enqueuer. A job
			// of its own is given before the worker starts, so that the
			// drain does not send the intent first.
			var done <-chan *river.Event
			if !tc.perJob {
				done = startSubscribed(t, pool, cfg)
			}
			key := "invoice:trace-" + strings.NewReplacer("/", "-", " ", "-").Replace(tc.name)
			reqCtx, req := tp.Tracer("app").Start(ctx, "POST /checkout")
			err = pgx.BeginFunc(reqCtx, pool, func(tx pgx.Tx) error {
				_, err := ob.Enqueue(reqCtx, tx, outbox.Intent{Key: key, Payload: json.RawMessage(body("ada@example.com"))})
				return err
			})
			req.End()
			if err != nil {
				t.Fatal(err)
			}
			if tc.perJob {
				outboxtest.GiveJobs(t, pool, key)
				done = startSubscribed(t, pool, cfg)
			}
			rec := outboxtest.Get(t, ob, key)
			enq := req.SpanContext()
			if want := fmt.Sprintf("00-%s-%s-01", enq.TraceID(), enq.SpanID()); rec.TraceParent != want {
				t.Fatalf("stored traceparent %q, want %q", rec.TraceParent, want)
			}

			if tc.perJob {
				// River emits the completion after the job's span has ended.
				for completed := false; !completed; {
					select {
					case ev := <-done:
						completed = ev.Job.ID == *rec.JobID
					case <-ctx.Done():
						t.Fatalf("job %d not completed: %v", *rec.JobID, ctx.Err())
					}
				}
			} else {
				for name := ""; name != "sendonce.send"; {
					select {
					case name = <-ended:
					case <-ctx.Done():
						t.Fatalf("no send span ended: %v", ctx.Err())
					}
				}
			}
			rec = outboxtest.Get(t, ob, key)
			if rec.State != outbox.StateSent || rec.Replayed != tc.replayed {
				t.Fatalf("intent %s replayed=%v, want sent replayed=%v", rec.State, rec.Replayed, tc.replayed)
			}

			spans := exp.GetSpans()
			t.Logf("the spans of the send:\n%s", renderTree(spans))
			send := only(t, spans, func(s tracetest.SpanStub) bool { return s.Name == "sendonce.send" })
			if tc.perJob {
				job := only(t, spans, func(s tracetest.SpanStub) bool { return s.Name == "river.work/sendonce_send" })
				if send.Parent.SpanID() != job.SpanContext.SpanID() || send.SpanContext.TraceID() != job.SpanContext.TraceID() {
					t.Errorf("send span's parent %s, want River's job span %s", send.Parent.SpanID(), job.SpanContext.SpanID())
				}
			} else if send.Parent.IsValid() || send.SpanContext.TraceID() == enq.TraceID() {
				t.Errorf("drained send span's parent %s in trace %s, want the root of a trace of its own", send.Parent.SpanID(), send.SpanContext.TraceID())
			}
			if len(send.Links) != 1 || send.Links[0].SpanContext.TraceID() != enq.TraceID() || send.Links[0].SpanContext.SpanID() != enq.SpanID() {
				t.Errorf("send span links %+v, want one to the enqueuer %s/%s", send.Links, enq.TraceID(), enq.SpanID())
			}
			wantAttrs(t, "send", send.Attributes, map[string]any{
				"sendonce.key": key, "sendonce.outcome": "sent", "sendonce.message_id": rec.MessageID,
				"sendonce.replayed": tc.replayed, "sendonce.attempt": int64(1),
			})
			if rec.MessageID == "" {
				t.Error("no message id recorded")
			}

			children := func(name string) []tracetest.SpanStub {
				var out []tracetest.SpanStub
				for _, s := range spans {
					if s.Parent.SpanID() == send.SpanContext.SpanID() && s.Name == name {
						out = append(out, s)
					}
				}
				slices.SortFunc(out, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
				return out
			}
			if tc.perJob {
				claim := children("sendonce.claim")
				if len(claim) != 1 {
					t.Fatalf("%d claim spans under the send span, want 1", len(claim))
				}
				wantAttrs(t, "claim", claim[0].Attributes, map[string]any{"sendonce.claimed": true, "sendonce.attempt": int64(1)})
			}
			attempts := children("POST")
			if len(attempts) != 2 {
				t.Fatalf("%d HTTP attempt spans under the send span, want 2", len(attempts))
			}
			wantAttrs(t, "first attempt", attempts[0].Attributes, map[string]any{
				"http.response.status_code": int64(500), "openemail.retry": true,
				"openemail.idempotency_key": key, "openemail.call": "emails.send",
			})
			if wait, ok := attr(attempts[0].Attributes, "openemail.retry.wait_ms"); !ok || wait.AsInt64() <= 0 {
				t.Errorf("first attempt's wait before the retry: %v (set %v), want > 0 ms", wait.AsInt64(), ok)
			}
			wantAttrs(t, "second attempt", attempts[1].Attributes, map[string]any{
				"http.response.status_code": int64(200), "openemail.retry": false,
				"http.request.resend_count": int64(1), "openemail.idempotency_key": key,
			})
			noSecrets(t, spans, traceAPIKey)
		})
	}
}

// TestBatchSpanLinksMembers: a coalesced batch's span, a child of River's
// job span, links to the span that enqueued each member. The members have
// River jobs of their own, which coalesce them, as in a database upgraded
// from a release before the drain (outboxtest.GiveJobs).
func TestBatchSpanLinksMembers(t *testing.T) {
	t.Parallel()
	ctx, pool, ob, fake, c := e2eSetup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var enqueuers []trace.SpanContext
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 3 {
			reqCtx, req := tp.Tracer("app").Start(ctx, "POST /invoices")
			_, err := ob.Enqueue(reqCtx, tx, outbox.Intent{Key: fmt.Sprintf("invoice:%d", i), Payload: json.RawMessage(body(fmt.Sprintf("c%d@example.com", i)))})
			req.End()
			if err != nil {
				return err
			}
			enqueuers = append(enqueuers, req.SpanContext())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.GiveJobs(t, pool, "invoice:0", "invoice:1", "invoice:2")
	// The batch freezes when its three members joined: no timing involved.
	done := startSubscribed(t, pool, &worker.Config{Client: c, TracerProvider: tp, Coalesce: 3, CoalesceWait: time.Minute})
	for completed := false; !completed; {
		select {
		case ev := <-done:
			completed = ev.Job.Kind == "sendonce_batch"
		case <-ctx.Done():
			t.Fatalf("no batch job completed: %v (%d deliveries)", ctx.Err(), len(fake.Deliveries()))
		}
	}

	spans := exp.GetSpans()
	job := only(t, spans, func(s tracetest.SpanStub) bool { return s.Name == "river.work/sendonce_batch" })
	batch := only(t, spans, func(s tracetest.SpanStub) bool { return s.Name == "sendonce.send_batch" })
	if batch.Parent.SpanID() != job.SpanContext.SpanID() {
		t.Errorf("batch span's parent %s, want River's job span %s", batch.Parent.SpanID(), job.SpanContext.SpanID())
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range batch.Links {
		linked[l.SpanContext.SpanID()] = true
	}
	for i, e := range enqueuers {
		if !linked[e.SpanID()] {
			t.Errorf("batch span does not link to member %d's enqueuer %s (links %v)", i, e.SpanID(), batch.Links)
		}
	}
	wantAttrs(t, "batch", batch.Attributes, map[string]any{"sendonce.outcome": "sent", "sendonce.batch.members": int64(3),
		"sendonce.batch.sent": int64(3), "sendonce.replayed": false})
	noSecrets(t, spans, "oe_test_e2e000000000000")
}

// startSubscribed starts a worker that stops when the test ends, and
// returns its River client's job completions, subscribed before it starts.
func startSubscribed(t *testing.T, pool *pgxpool.Pool, cfg *worker.Config) <-chan *river.Event {
	t.Helper()
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done, unsubscribe := w.RiverClient().Subscribe(river.EventKindJobCompleted)
	t.Cleanup(unsubscribe)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return done
}

// endedSpans is a span processor that tells the name of each span that
// ends, once the exporters before it have it (the first hundred: enough
// for one send's).
type endedSpans chan string

func (e endedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case e <- s.Name():
	default: // no one reads as many: never hold a span's end up
	}
}
func (e endedSpans) Shutdown(context.Context) error   { return nil }
func (e endedSpans) ForceFlush(context.Context) error { return nil }

// only finds the one span that matches.
func only(t *testing.T, spans tracetest.SpanStubs, match func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d matching spans, want 1", len(found))
	}
	return found[0]
}

func attr(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs checks attributes by key: string, bool or int64 values.
func wantAttrs(t *testing.T, span string, attrs []attribute.KeyValue, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := attr(attrs, k)
		if !ok {
			t.Errorf("%s span has no %s, want %v", span, k, v)
		} else if got.AsInterface() != v {
			t.Errorf("%s span's %s = %v, want %v", span, k, got.AsInterface(), v)
		}
	}
}

// noSecrets fails when the API key, or anything like an Authorization
// header, is in any span's name, attributes, events, links or status.
func noSecrets(t *testing.T, spans tracetest.SpanStubs, apiKey string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		add := func(attrs []attribute.KeyValue) {
			for _, a := range attrs {
				texts = append(texts, string(a.Key), a.Value.Emit())
			}
		}
		add(s.Attributes)
		add(s.Resource.Attributes())
		for _, e := range s.Events {
			texts = append(texts, e.Name)
			add(e.Attributes)
		}
		for _, l := range s.Links {
			add(l.Attributes)
		}
		for _, text := range texts {
			low := strings.ToLower(text)
			if strings.Contains(text, apiKey) || strings.Contains(low, "bearer") || strings.Contains(low, "authorization") {
				t.Errorf("span %s holds a secret: %q", s.Name, text)
			}
		}
	}
}

// renderTree prints the spans as an indented tree, each with its
// attributes and links: the text docs/tracing-and-metrics.md shows.
func renderTree(spans tracetest.SpanStubs) string {
	var b strings.Builder
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	for _, s := range spans {
		byParent[s.Parent.SpanID()] = append(byParent[s.Parent.SpanID()], s)
	}
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		kids := byParent[parent]
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for _, s := range kids {
			pad := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s  trace %s span %s\n", pad, s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID())
			for _, l := range s.Links {
				fmt.Fprintf(&b, "%s    link → trace %s span %s\n", pad, l.SpanContext.TraceID(), l.SpanContext.SpanID())
			}
			for _, a := range s.Attributes {
				fmt.Fprintf(&b, "%s    %s=%s\n", pad, a.Key, a.Value.Emit())
			}
			if s.Status.Description != "" {
				fmt.Fprintf(&b, "%s    status=%s %q\n", pad, s.Status.Code, s.Status.Description)
			}
			walk(s.SpanContext.SpanID(), depth+1)
		}
	}
	walk(trace.SpanID{}, 0)
	return b.String()
}
