package otlpexporter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The environment variables read here; the OTLP exporters read the rest
// (endpoint, headers, timeout, TLS, compression) themselves.
const (
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envBSPDelay       = "OTEL_BSP_SCHEDULE_DELAY"
	envBSPTimeout     = "OTEL_BSP_EXPORT_TIMEOUT"
	envBSPQueue       = "OTEL_BSP_MAX_QUEUE_SIZE"
	envBSPBatch       = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
)

func checkProtocol(p string) error {
	switch p {
	case ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON:
		return nil
	}
	return fmt.Errorf("unknown OTLP protocol %q (want %q, %q or %q)", p, ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON)
}

// protocolFromEnv returns the protocol the environment asks for: the
// traces-specific variable wins over the general one, as the specification
// says.
func protocolFromEnv() (string, error) {
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			if err := checkProtocol(v); err != nil {
				return "", fmt.Errorf("otlpexporter: %s: %w", name, err)
			}
			return v, nil
		}
	}
	return DefaultProtocol, nil
}

// batchFromEnv returns the batching defaults overridden by the OTEL_BSP_*
// variables. Like the SDK, it ignores a value that is not a positive
// integer.
func batchFromEnv() batchConfig {
	b := batchConfig{
		maxQueue:      DefaultMaxQueueSize,
		maxBatch:      DefaultMaxExportBatchSize,
		delay:         DefaultBatchTimeout,
		exportTimeout: DefaultExportTimeout,
	}
	if n, ok := envInt(envBSPQueue); ok {
		b.maxQueue = n
	}
	if n, ok := envInt(envBSPBatch); ok {
		b.maxBatch = n
	}
	if n, ok := envInt(envBSPDelay); ok {
		b.delay = time.Duration(n) * time.Millisecond
	}
	if n, ok := envInt(envBSPTimeout); ok {
		b.exportTimeout = time.Duration(n) * time.Millisecond
	}
	return b
}

func envInt(name string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name)))
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
