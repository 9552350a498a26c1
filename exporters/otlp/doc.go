// Package otlpexporter builds an OpenTelemetry TracerProvider that exports
// over OTLP, configured from the standard OTEL_* environment, with a
// bounded queue whose drops are counted. Hand it to the tracing package
// (tracing.WithTracerProvider) or install it globally
// (otel.SetTracerProvider). It lives in a package of its own so that a
// program that only scrapes /metrics never links gRPC.
//
// # Usage
//
//	tp, err := otlpexporter.NewTracerProvider(ctx)
//	if err != nil {
//		return err
//	}
//	defer func() {
//		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//		defer cancel()
//		_ = tp.Shutdown(ctx) // flushes; returns by the deadline whatever the collector does
//	}()
//	r, err := tracing.New(tracing.WithTracerProvider(tp), tracing.WithSampler(s))
//	...
//	log.Printf("spans dropped: %d", tp.Dropped())
//
// # Environment
//
// The protocol is chosen here; the exporter for it reads the rest itself.
//
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,  grpc, http/protobuf (the default, per the
//	OTEL_EXPORTER_OTLP_PROTOCOL          specification) or http/json; the first wins
//	OTEL_EXPORTER_OTLP_ENDPOINT,         the collector; the general one gets /v1/traces
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   appended for HTTP, the traces one is used as is
//	OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, headers, per-export timeout (default 10s),
//	..._TIMEOUT, ..._INSECURE,           plaintext for gRPC (an http:// endpoint implies it),
//	..._COMPRESSION, ..._CERTIFICATE     gzip, TLS
//	OTEL_SERVICE_NAME                    service.name of the resource
//	OTEL_RESOURCE_ATTRIBUTES             further resource attributes
//	OTEL_TRACES_SAMPLER[_ARG]            the sampler (read by the SDK)
//	OTEL_BSP_MAX_QUEUE_SIZE              queue bound (DefaultMaxQueueSize)
//	OTEL_BSP_MAX_EXPORT_BATCH_SIZE       batch bound (DefaultMaxExportBatchSize)
//	OTEL_BSP_SCHEDULE_DELAY              ms a span waits for its batch (DefaultBatchTimeout)
//	OTEL_BSP_EXPORT_TIMEOUT              ms one export may take (DefaultExportTimeout)
//
// Options override the environment: WithProtocol, WithMaxQueueSize and the
// other batch options, WithGRPCOptions and WithHTTPOptions (passed to the
// exporter after what it read), WithResource (whose attributes the
// environment still overrides, so that an operator can rename a service),
// WithTracerProviderOptions, and WithExporter to use another exporter.
// OTEL_TRACES_EXPORTER is not read: this provider always exports OTLP.
//
// # An unreachable collector never blocks the program
//
// Ending a span never blocks: it is put in a queue of at most
// MaxQueueSize spans, or dropped and counted (Dropped). One goroutine
// exports batches; each export is bounded by the export timeout, which
// covers the exporter's own retries. Memory is bounded by the queue, one
// batch and one request in flight. Shutdown exports what is queued but
// stops at the first failed export (the one in flight when it is called
// included), and it aborts the export in flight early enough to return by
// its context's deadline, or within one export timeout when the context
// has none, abandoning (and counting) the rest: its goroutine has ended
// when it returns. A collector that accepts and never answers holds
// Shutdown(context.Background()) for at most the export timeout.
//
// The SDK's BatchSpanProcessor is not used: it drops spans without
// counting them, and its Shutdown returns at the deadline while its
// goroutine keeps exporting.
//
// # Counters
//
//	Exported()  spans the exporter accepted
//	Failed()    spans in exports that failed (unreachable, refused, timed out)
//	Dropped()   spans never exported: queue full, ended during shutdown, or
//	            abandoned by Shutdown
//
// After Shutdown, Exported + Failed + Dropped is every sampled span that
// ended.
//
// # Concurrency
//
// All exported functions and methods are safe for concurrent use.
package otlpexporter
