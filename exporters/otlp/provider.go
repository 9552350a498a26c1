package otlpexporter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/attribute"

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
	cfg := config{batch: batchFromEnv()}
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	cfg.batch.maxBatch = min(cfg.batch.maxBatch, cfg.batch.maxQueue)

	res, err := buildResource(ctx, cfg.resource)
	if err != nil {
		return nil, err
	}
	exp := cfg.exporter
	if exp != nil {
		cfg.protocol = ""
	} else {
		// The environment is read only when no option chose: a bad
		// variable does not fail a program that does not use it.
		if cfg.protocol == "" {
			if cfg.protocol, err = protocolFromEnv(); err != nil {
				return nil, err
			}
		}
		if exp, err = newExporter(ctx, &cfg); err != nil {
			return nil, err
		}
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

// buildResource describes the process: service.name from
// OTEL_SERVICE_NAME (or "unknown_service:<program>", as the SDK's default
// resource has it), the telemetry.sdk.* attributes, OTEL_RESOURCE_ATTRIBUTES,
// and extra's attributes under the environment's, so that the environment
// wins. The environment is read on every call; resource.Default reads it
// once per process.
func buildResource(ctx context.Context, extra *resource.Resource) (*resource.Resource, error) {
	fromEnv, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		// A partial resource (an OTEL_RESOURCE_ATTRIBUTES entry that
		// does not parse) is used as it is, as the SDK does.
		return nil, fmt.Errorf("otlpexporter: resource from the environment: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "unknown_service:"+filepath.Base(os.Args[0])))
	if extra != nil {
		if res, err = resource.Merge(res, extra); err != nil {
			return nil, fmt.Errorf("otlpexporter: WithResource: %w", err)
		}
	}
	if res, err = resource.Merge(res, fromEnv); err != nil {
		return nil, fmt.Errorf("otlpexporter: WithResource: %w", err)
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
// goroutine ended. Once an export fails (the one in flight when Shutdown
// is called included), the rest is abandoned rather than tried batch after
// batch against an unreachable collector. Shutdown returns by ctx's
// deadline, or within one export timeout (WithExportTimeout,
// DefaultExportTimeout) if ctx has none, aborting the export in flight in
// time (a little before, to leave room to close the exporter), and at once
// if ctx is cancelled; the spans abandoned count as dropped, and the error
// then wraps context.DeadlineExceeded or ctx's cause. Against a collector
// that accepts and never answers, Shutdown(context.Background()) thus
// returns within the export timeout, over gRPC and HTTP alike. After
// Shutdown the provider makes no-op spans. Shutdown is safe to call more
// than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	return p.TracerProvider.Shutdown(ctx)
}

// ForceFlush exports the spans queued so far and waits until that is done
// or ctx ends.
func (p *Provider) ForceFlush(ctx context.Context) error {
	return p.TracerProvider.ForceFlush(ctx)
}
