package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sendonce/sendonce/cmd/internal/base/tracing"
)

// clearEnv unsets every variable that could turn tracing on (t.Setenv
// restores them after the test; it also keeps these tests serial, as they
// change the global provider).
func clearEnv(t *testing.T) {
	for _, k := range []string{tracing.EnvExporter, tracing.EnvEndpoint, tracing.EnvTracesEndpoint, tracing.EnvSDKDisabled,
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(k, "")
	}
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
}

func TestOffUnlessAsked(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{tracing.EnvExporter: "none"},
		{tracing.EnvExporter: "none", tracing.EnvEndpoint: "http://127.0.0.1:4318"},
		{tracing.EnvSDKDisabled: "true", tracing.EnvExporter: "console"},
	} {
		clearEnv(t)
		for k, v := range env {
			t.Setenv(k, v)
		}
		tr, err := tracing.Setup(context.Background(), "sendonce")
		if err != nil || tr != nil {
			t.Errorf("env %v: Setup = %v, %v; want off", env, tr, err)
		}
		if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
			t.Errorf("env %v: an SDK provider was installed", env)
		}
	}
}

func TestBadExporterIsAnError(t *testing.T) {
	clearEnv(t)
	t.Setenv(tracing.EnvExporter, "jaegar")
	_, err := tracing.Setup(context.Background(), "sendonce")
	if err == nil || !strings.Contains(err.Error(), `OTEL_TRACES_EXPORTER="jaegar"`) {
		t.Fatalf("Setup = %v, want an error naming OTEL_TRACES_EXPORTER", err)
	}
}

// TestEndpointTurnsOnOTLP: an OTLP endpoint alone turns tracing on, and
// Shutdown sends the buffered spans there, with the service name.
func TestEndpointTurnsOnOTLP(t *testing.T) {
	clearEnv(t)
	var mu sync.Mutex
	var posts []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv(tracing.EnvEndpoint, collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000") // an hour: only Shutdown sends

	tr, err := tracing.Setup(context.Background(), "sendonce")
	if err != nil || tr == nil || tr.Exporter != "otlp" {
		t.Fatalf("Setup = %+v, %v; want otlp", tr, err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "work")
	span.End()
	mu.Lock()
	before := len(posts)
	mu.Unlock()
	if before != 0 {
		t.Fatalf("spans sent before the batch was flushed: %v", posts)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || posts[0] != "POST /v1/traces" {
		t.Fatalf("collector got %v, want one POST /v1/traces at shutdown", posts)
	}
}

func TestConsole(t *testing.T) {
	clearEnv(t)
	t.Setenv(tracing.EnvExporter, "console")
	tr, err := tracing.Setup(context.Background(), "sendonce")
	if err != nil || tr == nil || tr.Exporter != "console" {
		t.Fatalf("Setup = %+v, %v; want console", tr, err)
	}
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); !sdk {
		t.Error("no SDK provider installed")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
