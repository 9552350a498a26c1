package otlpexporter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
)

func newProvider(t *testing.T, opts ...otlpexporter.Option) *otlpexporter.Provider {
	t.Helper()
	p, err := otlpexporter.NewTracerProvider(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// The real OTLP exporters, chosen by protocol from the environment,
// deliver to an in-process receiver with the service name from
// OTEL_SERVICE_NAME.
func TestExportsToReceiver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(*testing.T) (*receiver, string)
		env   func(addr string) map[string]string
		proto string
	}{
		{
			name:  "grpc",
			start: startGRPCReceiver,
			env: func(addr string) map[string]string {
				return map[string]string{
					"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
					"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr,
				}
			},
			proto: "grpc",
		},
		{
			name:  "http/protobuf by default",
			start: startHTTPReceiver,
			env: func(url string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": url}
			},
			proto: "http/protobuf",
		},
		{
			name:  "traces-specific variables win",
			start: startHTTPReceiver,
			env: func(url string) map[string]string {
				return map[string]string{
					"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",
					"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
					"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://" + closedPort(t),
					"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url + "/v1/traces",
				}
			},
			proto: "http/protobuf",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv, addr := tc.start(t)
			env := tc.env(addr)
			env["OTEL_SERVICE_NAME"] = "gcprobe-otlp-test"
			env["OTEL_RESOURCE_ATTRIBUTES"] = "deployment.environment.name=test"
			setEnv(t, env)
			p := newProvider(t)
			if p.Protocol() != tc.proto {
				t.Errorf("Protocol = %q, want %q", p.Protocol(), tc.proto)
			}
			_, span := p.Tracer("test").Start(context.Background(), "gcprobe.test")
			span.SetAttributes(attribute.Int("code.line.number", 42))
			span.End()
			if err := p.ForceFlush(context.Background()); err != nil {
				t.Fatalf("ForceFlush: %v", err)
			}
			got := awaitSpans(t, rcv, 1)
			if got[0].span.Name != "gcprobe.test" || got[0].service != "gcprobe-otlp-test" {
				t.Errorf("received %q from service %q", got[0].span.Name, got[0].service)
			}
			if a := got[0].span.Attributes; len(a) != 1 || a[0].Key != "code.line.number" || a[0].Value.GetIntValue() != 42 {
				t.Errorf("attributes %v", a)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if p.Exported() != 1 || p.Dropped() != 0 || p.Failed() != 0 {
				t.Errorf("exported %d dropped %d failed %d", p.Exported(), p.Dropped(), p.Failed())
			}
		})
	}
}

// A collector that is down or hung blocks nothing: ending 10 000 spans
// takes no longer than making them, spans past the queue are counted as
// dropped, and Shutdown keeps its deadline.
//
// The gRPC exporter retries a refused connection until its timeout, and an
// unanswered request waits for it: the loop is stuck on its first batch
// and holds at most the queue and that batch, so at least n-2048-512 spans
// must be dropped. The HTTP exporter gives up on a refused connection at
// once; the queue still overflows, since failing batches are slower than
// ending spans, but by how much depends on the machine.
func TestCollectorUnreachable(t *testing.T) {
	const n = 10000
	for _, tc := range []struct {
		name, protocol string
		addr           func(*testing.T) string
		stuck          bool
	}{
		{"grpc down", "grpc", closedPort, true},
		{"http down", "http/protobuf", closedPort, false},
		{"grpc hung", "grpc", hungServer, true},
		{"http hung", "http/protobuf", hungServer, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + tc.addr(t),
			})
			p := newProvider(t, otlpexporter.WithMaxQueueSize(2048))
			tr := p.Tracer("test")
			start := time.Now()
			for range n {
				_, s := tr.Start(context.Background(), "gcprobe.test")
				s.End()
			}
			took := time.Since(start)
			t.Logf("%d spans ended in %v; dropped %d so far", n, took, p.Dropped())
			if took > 5*time.Second {
				t.Errorf("ending %d spans took %v with the collector unreachable", n, took)
			}
			if want := uint64(n - 2048 - 512); tc.stuck && p.Dropped() < want {
				t.Errorf("Dropped = %d, want >= %d", p.Dropped(), want)
			}
			if p.Dropped() == 0 {
				t.Error("no span dropped: the queue never filled")
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start = time.Now()
			err := p.Shutdown(ctx)
			took = time.Since(start)
			t.Logf("Shutdown took %v: %v", took, err)
			// Shutdown aims to return 250ms before its deadline; the
			// slack allowed past it is for a loaded CI machine.
			if took > 2*time.Second+3*time.Second {
				t.Errorf("Shutdown took %v, past its 2s timeout", took)
			}
			if tc.stuck && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Shutdown = %v, want an error wrapping DeadlineExceeded", err)
			}
			if err == nil && p.Dropped() > 0 && p.Failed() == 0 {
				t.Error("Shutdown reported no error although nothing was exported")
			}
			if got := p.Exported() + p.Failed() + p.Dropped(); got != n || p.Exported() != 0 {
				t.Errorf("exported %d + failed %d + dropped %d = %d, want 0 + ... = %d",
					p.Exported(), p.Failed(), p.Dropped(), got, n)
			}
		})
	}
}

func TestProtocolErrors(t *testing.T) {
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"})
	if _, err := otlpexporter.NewTracerProvider(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Errorf("bad protocol in the environment: %v", err)
	}
	// An option overrides the environment, even a bad one.
	p := newProvider(t, otlpexporter.WithProtocol("grpc"))
	if p.Protocol() != "grpc" {
		t.Errorf("Protocol = %q", p.Protocol())
	}
}

func TestHTTPJSON(t *testing.T) {
	setEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + closedPort(t),
	})
	if p := newProvider(t); p.Protocol() != "http/json" {
		t.Errorf("Protocol = %q", p.Protocol())
	}
}

func TestOptionErrors(t *testing.T) {
	setEnv(t, nil)
	tests := []struct {
		name string
		give otlpexporter.Option
		want string
	}{
		{"nil option", nil, "otlpexporter: NewTracerProvider: nil Option"},
		{"bad protocol", otlpexporter.WithProtocol("udp"), "WithProtocol"},
		{"nil exporter", otlpexporter.WithExporter(nil), "WithExporter"},
		{"nil resource", otlpexporter.WithResource(nil), "WithResource"},
		{"zero queue", otlpexporter.WithMaxQueueSize(0), "WithMaxQueueSize"},
		{"zero batch", otlpexporter.WithMaxExportBatchSize(0), "WithMaxExportBatchSize"},
		{"zero batch timeout", otlpexporter.WithBatchTimeout(0), "WithBatchTimeout"},
		{"zero export timeout", otlpexporter.WithExportTimeout(0), "WithExportTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := otlpexporter.NewTracerProvider(context.Background(), tt.give)
			if err == nil || p != nil {
				t.Fatalf("NewTracerProvider = %v, %v; want an error", p, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "otlpexporter: ") {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
}

// The environment's service name wins over WithResource's; WithResource's
// other attributes are kept.
func TestResource(t *testing.T) {
	rcv, addr := startGRPCReceiver(t)
	setEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr,
		"OTEL_SERVICE_NAME":           "from-env",
	})
	p := newProvider(t, otlpexporter.WithResource(resource.NewSchemaless(
		attribute.String("service.name", "from-code"),
		attribute.String("service.version", "1.2.3"),
	)))
	_, s := p.Tracer("test").Start(context.Background(), "gcprobe.test")
	s.End()
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitSpans(t, rcv, 1)
	rcv.mu.Lock()
	attrs := rcv.reqs[0].ResourceSpans[0].Resource.Attributes
	rcv.mu.Unlock()
	if got := stringAttr(attrs, "service.name"); got != "from-env" {
		t.Errorf("service.name = %q, want from-env", got)
	}
	if got := stringAttr(attrs, "service.version"); got != "1.2.3" {
		t.Errorf("service.version = %q, want 1.2.3", got)
	}
	if got := stringAttr(attrs, "telemetry.sdk.language"); got != "go" {
		t.Errorf("telemetry.sdk.language = %q, want go", got)
	}
}

// The OTEL_BSP_* variables bound the queue like the options do.
func TestBSPEnvironment(t *testing.T) {
	setEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + closedPort(t),
		"OTEL_BSP_MAX_QUEUE_SIZE":     "10",
		"OTEL_BSP_SCHEDULE_DELAY":     "3600000",
	})
	p := newProvider(t)
	tr := p.Tracer("test")
	for range 25 {
		_, s := tr.Start(context.Background(), "gcprobe.test")
		s.End()
	}
	// The batch (at most the queue size) waits for an hour: the queue
	// holds 10, the goroutine's batch up to 10 more.
	if d := p.Dropped(); d < 5 || d > 15 {
		t.Errorf("Dropped = %d with a queue of 10 and 25 spans, want 5..15", d)
	}
}
