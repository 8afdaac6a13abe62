// Package tracing sets up OpenTelemetry tracing for the sendonce command
// from the standard OTEL_* environment variables, and leaves it off (the
// global no-op provider) unless they ask for it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The environment variables that turn tracing on. The exporter, the OTLP
// protocol and headers, the sampler (OTEL_TRACES_SAMPLER), the batching
// (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
// are read by OpenTelemetry's own packages from their standard variables.
const (
	EnvExporter       = "OTEL_TRACES_EXPORTER"               // otlp, console or none
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"        // with no exporter named: otlp
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" // the same, for traces only
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"                  // "true": off whatever else is set
)

// Tracing is the tracer provider Setup installed.
type Tracing struct {
	// Exporter is what the spans go to: "otlp", "console", ….
	Exporter string
	provider *sdktrace.TracerProvider
}

// Setup installs an SDK tracer provider as OpenTelemetry's global one when
// the environment asks for traces: OTEL_TRACES_EXPORTER names an exporter
// other than none, or an OTLP endpoint is set (then the exporter is otlp).
// Otherwise, or with OTEL_SDK_DISABLED=true, it returns nil and installs
// nothing: spans cost next to nothing. Call Shutdown on the result before
// the program exits, to send the spans still buffered.
//
// service is the default service.name; OTEL_SERVICE_NAME wins over it.
func Setup(ctx context.Context, service string) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true") {
		return nil, nil
	}
	name := strings.TrimSpace(os.Getenv(EnvExporter))
	if name == "" && os.Getenv(EnvEndpoint) == "" && os.Getenv(EnvTracesEndpoint) == "" {
		return nil, nil
	}
	if name == "" {
		name = "otlp"
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %s=%q: %w (want otlp, console or none)", EnvExporter, os.Getenv(EnvExporter), err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, nil
	}
	// Later sources win: the default name, then the environment's.
	res, err := sdkresource.New(ctx,
		sdkresource.WithAttributes(semconv.ServiceName(service)),
		sdkresource.WithTelemetrySDK(),
		sdkresource.WithFromEnv())
	if err != nil && !errors.Is(err, sdkresource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Tracing{Exporter: name, provider: tp}, nil
}

// Shutdown sends the spans still buffered and stops the exporter. A nil
// Tracing (tracing off) has nothing to do.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}
