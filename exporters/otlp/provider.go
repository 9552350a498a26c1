package otlpexporter

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Provider is an SDK TracerProvider exporting over OTLP through a bounded
// queue, with counts of what became of the spans. Use it wherever a
// trace.TracerProvider is wanted (tracing.WithTracerProvider,
// otel.SetTracerProvider), and Shutdown it when the program ends.
type Provider struct {
	*sdktrace.TracerProvider
	batcher  *batcher
	protocol string
}

// NewTracerProvider returns a Provider configured from the standard
// OpenTelemetry environment and opts; see the package documentation. ctx
// is used while creating the exporter only. The Provider starts one
// goroutine; Shutdown ends it.
func NewTracerProvider(ctx context.Context, opts ...Option) (*Provider, error) {
	protocol, err := protocolFromEnv()
	if err != nil {
		return nil, err
	}
	cfg := config{protocol: protocol, batch: batchFromEnv()}
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	cfg.batch.maxBatch = min(cfg.batch.maxBatch, cfg.batch.maxQueue)

	res, err := buildResource(cfg.resource)
	if err != nil {
		return nil, err
	}
	exp := cfg.exporter
	if exp == nil {
		if exp, err = newExporter(ctx, &cfg); err != nil {
			return nil, err
		}
	} else {
		cfg.protocol = ""
	}
	b := newBatcher(exp, cfg.batch, cfg.logger)
	tpOpts := append(cfg.tpOpts[:len(cfg.tpOpts):len(cfg.tpOpts)],
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(b),
	)
	return &Provider{
		TracerProvider: sdktrace.NewTracerProvider(tpOpts...),
		batcher:        b,
		protocol:       cfg.protocol,
	}, nil
}

// newExporter makes the OTLP exporter for cfg's protocol. Both exporters
// read the endpoint, headers, timeout, TLS and compression from the
// environment; the options given with WithGRPCOptions or WithHTTPOptions
// come after, so they win.
func newExporter(ctx context.Context, cfg *config) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch cfg.protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx, cfg.grpcOpts...)
	case ProtocolHTTPJSON:
		opts := append([]otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON)}, cfg.httpOpts...)
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		opts := append([]otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf)}, cfg.httpOpts...)
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("otlpexporter: creating the %s exporter: %w", cfg.protocol, err)
	}
	return exp, nil
}

// buildResource is the SDK's default resource (service.name from
// OTEL_SERVICE_NAME or "unknown_service:<program>", telemetry.sdk.*,
// OTEL_RESOURCE_ATTRIBUTES) with extra's attributes, under the environment
// again so that it wins.
func buildResource(extra *resource.Resource) (*resource.Resource, error) {
	res := resource.Default()
	if extra == nil {
		return res, nil
	}
	res, err := resource.Merge(res, extra)
	if err != nil {
		return nil, fmt.Errorf("otlpexporter: WithResource: %w", err)
	}
	res, err = resource.Merge(res, resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("otlpexporter: resource from the environment: %w", err)
	}
	return res, nil
}

// Protocol returns the OTLP protocol the provider exports with, or "" when
// WithExporter gave it another exporter.
func (p *Provider) Protocol() string { return p.protocol }

// Dropped returns how many sampled spans ended without an export attempt:
// the queue was full, the provider was shutting down, or Shutdown's
// deadline abandoned them.
func (p *Provider) Dropped() uint64 { return p.batcher.dropped.Load() }

// Exported returns how many spans the exporter accepted.
func (p *Provider) Exported() uint64 { return p.batcher.exported.Load() }

// Failed returns how many spans were in exports that failed (the collector
// unreachable or refusing them, or the export timing out). They are not
// retried beyond the exporter's own retries.
func (p *Provider) Failed() uint64 { return p.batcher.failed.Load() }

// Shutdown flushes the queued spans and stops the provider: the spans
// still queued are exported, the exporter shut down, and the provider's
// goroutine ended. Once an export fails, the rest is abandoned rather than
// tried batch after batch against an unreachable collector. If ctx has a
// deadline, Shutdown returns by it, aborting the export in flight in time
// (a little before, to leave room to close the exporter); the spans
// abandoned count as dropped, and the error then wraps
// context.DeadlineExceeded. After Shutdown the provider makes no-op spans.
// Shutdown is safe to call more than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	return p.TracerProvider.Shutdown(ctx)
}

// ForceFlush exports the spans queued so far and waits until that is done
// or ctx ends.
func (p *Provider) ForceFlush(ctx context.Context) error {
	return p.TracerProvider.ForceFlush(ctx)
}
