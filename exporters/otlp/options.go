package otlpexporter

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Protocols, the values of OTEL_EXPORTER_OTLP_PROTOCOL and WithProtocol.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolHTTPJSON     = "http/json"
)

// Defaults of the batching processor, as the OpenTelemetry specification
// gives them for the batch span processor. Each can be set by its
// OTEL_BSP_* environment variable or by an option, which wins.
const (
	// DefaultProtocol is the protocol without OTEL_EXPORTER_OTLP_PROTOCOL,
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or WithProtocol.
	DefaultProtocol = ProtocolHTTPProtobuf
	// DefaultMaxQueueSize bounds the spans waiting for export
	// (OTEL_BSP_MAX_QUEUE_SIZE, WithMaxQueueSize).
	DefaultMaxQueueSize = 2048
	// DefaultMaxExportBatchSize bounds the spans of one export
	// (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, WithMaxExportBatchSize).
	DefaultMaxExportBatchSize = 512
	// DefaultBatchTimeout is the longest a span waits for its batch to
	// fill (OTEL_BSP_SCHEDULE_DELAY, WithBatchTimeout).
	DefaultBatchTimeout = 5 * time.Second
	// DefaultExportTimeout bounds one export, retries included
	// (OTEL_BSP_EXPORT_TIMEOUT, WithExportTimeout). The exporter's own
	// timeout (OTEL_EXPORTER_OTLP_TIMEOUT, default 10s) applies within it.
	DefaultExportTimeout = 30 * time.Second
)

// Option configures NewTracerProvider. An Option rejects a bad value with
// an error, which NewTracerProvider returns.
type Option func(*config) error

type config struct {
	protocol string
	exporter sdktrace.SpanExporter
	resource *resource.Resource
	grpcOpts []otlptracegrpc.Option
	httpOpts []otlptracehttp.Option
	tpOpts   []sdktrace.TracerProviderOption
	batch    batchConfig
	logger   *slog.Logger
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("otlpexporter: NewTracerProvider: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// WithProtocol chooses the OTLP protocol, overriding the environment:
// ProtocolGRPC, ProtocolHTTPProtobuf or ProtocolHTTPJSON.
func WithProtocol(p string) Option {
	return func(c *config) error {
		if err := checkProtocol(p); err != nil {
			return fmt.Errorf("otlpexporter: WithProtocol: %w", err)
		}
		c.protocol = p
		return nil
	}
}

// WithExporter makes the provider send its spans to exp instead of an OTLP
// exporter built from the environment; the protocol is then ignored. exp
// must honour its context's cancellation, or Shutdown cannot keep its
// deadline. exp must not be nil.
func WithExporter(exp sdktrace.SpanExporter) Option {
	return func(c *config) error {
		if exp == nil {
			return errors.New("otlpexporter: WithExporter: nil SpanExporter")
		}
		c.exporter = exp
		return nil
	}
}

// WithResource adds r's attributes to the resource the provider describes
// its spans with. The environment (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) still wins over r, so that an operator can
// rename a service without rebuilding it. r must not be nil.
func WithResource(r *resource.Resource) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("otlpexporter: WithResource: nil Resource")
		}
		c.resource = r
		return nil
	}
}

// WithGRPCOptions passes options to the OTLP/gRPC exporter, after those it
// reads from the environment, so they win.
func WithGRPCOptions(opts ...otlptracegrpc.Option) Option {
	return func(c *config) error {
		c.grpcOpts = append(c.grpcOpts, opts...)
		return nil
	}
}

// WithHTTPOptions passes options to the OTLP/HTTP exporter, after those it
// reads from the environment, so they win.
func WithHTTPOptions(opts ...otlptracehttp.Option) Option {
	return func(c *config) error {
		c.httpOpts = append(c.httpOpts, opts...)
		return nil
	}
}

// WithTracerProviderOptions passes options to sdktrace.NewTracerProvider,
// e.g. a sampler or span limits. Options that set the resource are
// overridden by the provider's own.
func WithTracerProviderOptions(opts ...sdktrace.TracerProviderOption) Option {
	return func(c *config) error {
		c.tpOpts = append(c.tpOpts, opts...)
		return nil
	}
}

// WithMaxQueueSize bounds the spans waiting for export (default
// DefaultMaxQueueSize): past it, ending a span drops it, counted by
// Dropped. n must be at least 1.
func WithMaxQueueSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("otlpexporter: WithMaxQueueSize: must be >= 1, got %d", n)
		}
		c.batch.maxQueue = n
		return nil
	}
}

// WithMaxExportBatchSize bounds the spans sent in one export (default
// DefaultMaxExportBatchSize; at most the queue size). n must be at least 1.
func WithMaxExportBatchSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("otlpexporter: WithMaxExportBatchSize: must be >= 1, got %d", n)
		}
		c.batch.maxBatch = n
		return nil
	}
}

// WithBatchTimeout sets the longest a span waits for its batch to fill
// before it is exported anyway (default DefaultBatchTimeout). d must be
// positive.
func WithBatchTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("otlpexporter: WithBatchTimeout: must be > 0, got %v", d)
		}
		c.batch.delay = d
		return nil
	}
}

// WithExportTimeout bounds one export, retries included (default
// DefaultExportTimeout). d must be positive.
func WithExportTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("otlpexporter: WithExportTimeout: must be > 0, got %v", d)
		}
		c.batch.exportTimeout = d
		return nil
	}
}

// WithLogger makes the provider log when exports start failing and when
// they work again (one line per change, not per failure). Without it the
// provider is silent; the counts are in Failed and Dropped either way.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}
