package server

import (
	"context"
	"net/http"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// propagator is passed explicitly to otelgrpc on both sides: the global default is a no-op,
// which would silently break traces across services.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// SetupTracing is tracing for a process that serves no gRPC (the gateway): newTracerProvider's
// provider and the W3C propagator become the global ones, so otelgrpc client handlers built
// without options export spans and carry the trace to the services. It returns the flush.
func SetupTracing(ctx context.Context, name string) (shutdown func(context.Context) error, err error) {
	_, shutdown, err = newTracerProvider(ctx, name)
	if err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(propagator)
	return shutdown, nil
}

// WithTraceContext returns r's context carrying the trace context its caller sent
// (traceparent, baggage), so a REST caller's trace continues through the services.
func WithTraceContext(r *http.Request) context.Context {
	return propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}

// newTracerProvider exports spans over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT (or the
// traces-specific variable) is set, configured by the standard OTEL_* variables, and records
// nothing otherwise, so a local run needs no collector. The exporting provider also becomes
// the global one, so Dial's client spans join the same traces.
func newTracerProvider(ctx context.Context, name string) (trace.TracerProvider, func(context.Context) error, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp, tp.Shutdown, nil
}
