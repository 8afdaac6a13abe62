package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver that keeps what it is sent.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	names []string // the resources' service.name
	bad   []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &collectortrace.ExportTraceServiceRequest{}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		c.bad = append(c.bad, r.Method+" "+r.URL.Path)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.names = append(c.names, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// TestBinaryTraces: with an OTLP endpoint in the environment, work sends
// its spans there, the last of them when SIGTERM stops it; the send span of
// an intent a plain-SQL producer inserted with a traceparent links to it.
func TestBinaryTraces(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	dbURL, fake, environ := newBinaryEnv(t,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=3600000", // an hour: the spans go out at exit
	)

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	pool := poolFor(t, dbURL)
	if _, err := pool.Exec(t.Context(), `INSERT INTO sendonce_outbox (idempotency_key, payload, traceparent) VALUES ('sql:traced', $1, $2)`,
		emailBody("traced@example.com"), parent); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, bin, environ, "", "show", "sql:traced"); r.code != 0 || !strings.Contains(r.stdout, "traceparent:") || !strings.Contains(r.stdout, parent) {
		t.Errorf("show: %v, want the stored traceparent", r)
	}
	// A malformed traceparent is refused, naming the column's check.
	_, err := pool.Exec(t.Context(), `INSERT INTO sendonce_outbox (idempotency_key, payload, traceparent) VALUES ('sql:bad', $1, 'nope')`,
		emailBody("bad@example.com"))
	if err == nil || !strings.Contains(err.Error(), "sendonce_outbox_traceparent_check") {
		t.Fatalf("malformed traceparent: %v, want the check's refusal", err)
	}

	cmd, lines, stderr := startBinaryWork(t, bin, environ, "sendonce work: ",
		"--http-addr", "", "--fetch-poll-interval", "50ms", "--sweep-interval", "50ms", "--log-format", "json")
	if err := fake.WaitDeliveries(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	// The intent is sent once its row says so; the span ends just after.
	eventually(t, 30*time.Second, "the intent sent", func() bool {
		return count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == 1
	})
	stopWork(t, cmd, lines, stderr)
	if !strings.Contains(stderr.String(), `"msg":"tracing on","exporter":"otlp"`) {
		t.Errorf("no \"tracing on\" log line:\n%s", stderr.String())
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.bad) > 0 {
		t.Errorf("collector got bad requests: %v", col.bad)
	}
	var send *tracepb.Span
	names := map[string]int{}
	for _, s := range col.spans {
		names[s.Name]++
		if s.Name == "sendonce.send" {
			send = s
		}
	}
	// A row inserted by SQL has no River job of its own: the drain claims
	// it (one statement for the whole batch, no span per intent), and the
	// send's span is a root that links to the producer's.
	if send == nil || names["sendonce.send"] != 1 || names["POST"] != 1 || names["river.work/sendonce_send"] != 0 {
		t.Fatalf("spans exported at exit: %v, want the send and one POST, and no River job span", names)
	}
	if len(send.Links) != 1 || hex.EncodeToString(send.Links[0].TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		hex.EncodeToString(send.Links[0].SpanId) != "00f067aa0ba902b7" {
		t.Errorf("send span links %v, want the stored traceparent %s", send.Links, parent)
	}
	for _, n := range col.names {
		if n != "sendonce" {
			t.Errorf("service.name %q, want sendonce", n)
		}
	}
}
