package otlpexporter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/tracing"

	"github.com/gcprobe/probe/internal/testkit"
)

// e2eObj is big enough never to be tiny-allocated.
type e2eObj struct {
	p   *int
	buf [48]byte
}

var e2eLeaked []*e2eObj

func plantE2ELeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := &e2eObj{}
		w.SetFinalizer(o, func(*e2eObj) {}) // marker: e2e-leak
		e2eLeaked = append(e2eLeaked, o)
	}
}

// TestCollectorEndToEnd sends a leak report over OTLP/gRPC and OTLP/HTTP to
// a real OpenTelemetry Collector and reads it back from the collector's
// file exporter: the report names the line where the test planted a leak.
func TestCollectorEndToEnd(t *testing.T) {
	bin := os.Getenv("GCPROBE_OTELCOL")
	if bin == "" {
		t.Skip("GCPROBE_OTELCOL is unset: `source scripts/testenv.sh` builds the OpenTelemetry Collector and sets it")
	}
	col := startCollector(t, bin)

	t.Cleanup(func() { e2eLeaked = nil })
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	plantE2ELeak(w, 4)
	line := testkit.MarkerLine(t, "e2e_test.go", "e2e-leak")
	testkit.AwaitGC(t, 20*time.Second, "the planted leak's 4 suspects on top", func() bool {
		top := ledgertest.Top(w, 1)
		return len(top) > 0 && top[0].Suspect >= 4
	})

	for _, tc := range []struct{ protocol, endpoint string }{
		{"grpc", "http://" + col.grpcAddr},
		{"http/protobuf", "http://" + col.httpAddr},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			service := "gcprobe-e2e-" + strings.ReplaceAll(tc.protocol, "/", "-")
			setEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT": tc.endpoint,
				"OTEL_SERVICE_NAME":           service,
			})
			p, err := otlpexporter.NewTracerProvider(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r, err := tracing.New(tracing.WithTracerProvider(p), tracing.WithWatcher(w))
			if err != nil {
				t.Fatal(err)
			}
			ctx, parent := p.Tracer("e2e").Start(context.Background(), "e2e")
			r.ReportNow(ctx)
			parent.End()
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.Shutdown(sctx); err != nil {
				t.Fatalf("Shutdown: %v\ncollector output:\n%s", err, col.output())
			}
			if p.Exported() != 2 || p.Dropped() != 0 || p.Failed() != 0 {
				t.Errorf("exported %d dropped %d failed %d, want 2 0 0", p.Exported(), p.Dropped(), p.Failed())
			}

			span := col.awaitSpan(t, service, "gcprobe.leak_report")
			if want := parent.SpanContext().TraceID().String(); span.TraceID != want {
				t.Errorf("traceId %q, want %q", span.TraceID, want)
			}
			if want := parent.SpanContext().SpanID().String(); span.ParentSpanID != want {
				t.Errorf("parentSpanId %q, want %q", span.ParentSpanID, want)
			}
			if len(span.Events) != 1 || span.Events[0].Name != "gcprobe.site" {
				t.Fatalf("events %+v, want one gcprobe.site", span.Events)
			}
			ev := span.Events[0]
			if got, _ := ev.intAttr("code.line.number"); got != int64(line) {
				t.Errorf("code.line.number = %d, want %d (the planted line)", got, line)
			}
			if got := ev.stringAttr("code.function.name"); got != "github.com/gcprobe/probe/exporters/otlp_test.plantE2ELeak" {
				t.Errorf("code.function.name = %q", got)
			}
			if got := ev.stringAttr("code.file.path"); filepath.Base(got) != "e2e_test.go" {
				t.Errorf("code.file.path = %q", got)
			}
			if got := ev.stringAttr("code.stacktrace"); !strings.Contains(got, "e2e_test.go:"+strconv.Itoa(line)+"\n") {
				t.Errorf("code.stacktrace lacks the planted line:\n%s", got)
			}
			if got, _ := ev.intAttr("gcprobe.suspect"); got != 4 {
				t.Errorf("gcprobe.suspect = %d, want 4", got)
			}
			if ev.stringAttr("gcprobe.kind") != "finalizer" {
				t.Errorf("gcprobe.kind = %q", ev.stringAttr("gcprobe.kind"))
			}
		})
	}
}

// collector is a running OpenTelemetry Collector.
type collector struct {
	grpcAddr, httpAddr string
	file               string
	mu                 sync.Mutex
	out                bytes.Buffer
}

func (c *collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *collector) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// startCollector runs the collector at bin with an OTLP receiver (gRPC and
// HTTP, on free loopback ports) and a file exporter, until the test ends.
func startCollector(t *testing.T, bin string) *collector {
	t.Helper()
	c, _ := startCollectorAt(t, bin, freeAddr(t), freeAddr(t))
	return c
}

// startCollectorAt is startCollector on the given addresses; it returns a
// function that kills the collector early (the test's cleanup does
// otherwise).
func startCollectorAt(t *testing.T, bin, grpcAddr, httpAddr string) (*collector, func()) {
	t.Helper()
	dir := t.TempDir()
	c := &collector{grpcAddr: grpcAddr, httpAddr: httpAddr, file: filepath.Join(dir, "traces.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, c.grpcAddr, c.httpAddr, c.file)
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config=file:"+cfgPath)
	cmd.Stdout, cmd.Stderr = c, c
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	t.Cleanup(kill)

	deadline := time.Now().Add(30 * time.Second) // for both addresses
	for _, addr := range []string{c.grpcAddr, c.httpAddr} {
		testkit.PollEvery(t, time.Until(deadline), 20*time.Millisecond, "the collector to listen on "+addr, func() (bool, string) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				return true, ""
			}
			select {
			case err := <-exited:
				t.Fatalf("collector exited: %v\n%s", err, c.output())
			default:
			}
			return false, c.output()
		})
	}
	return c, kill
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return closedPort(t)
}

// The collector's file exporter writes one OTLP-JSON
// ExportTraceServiceRequest per line. Its trace and span IDs are hex
// strings (protojson would expect base64), so it is read with
// encoding/json into these types.
type jsonRequest struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []jsonKV `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []jsonSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type jsonSpan struct {
	TraceID      string      `json:"traceId"`
	SpanID       string      `json:"spanId"`
	ParentSpanID string      `json:"parentSpanId"`
	Name         string      `json:"name"`
	Attributes   jsonKVs     `json:"attributes"`
	Events       []jsonEvent `json:"events"`
}

type jsonEvent struct {
	Name       string  `json:"name"`
	Attributes jsonKVs `json:"attributes"`
}

type jsonKV struct {
	Key   string `json:"key"`
	Value struct {
		StringValue *string `json:"stringValue"`
		// OTLP-JSON writes 64-bit integers as decimal strings;
		// accept a bare number too.
		IntValue json.RawMessage `json:"intValue"`
	} `json:"value"`
}

type jsonKVs []jsonKV

func (e jsonEvent) stringAttr(key string) string { return e.Attributes.stringAttr(key) }
func (e jsonEvent) intAttr(key string) (int64, bool) {
	return e.Attributes.intAttr(key)
}

func (kvs jsonKVs) stringAttr(key string) string {
	for _, kv := range kvs {
		if kv.Key == key && kv.Value.StringValue != nil {
			return *kv.Value.StringValue
		}
	}
	return ""
}

func (kvs jsonKVs) intAttr(key string) (int64, bool) {
	for _, kv := range kvs {
		if kv.Key == key && kv.Value.IntValue != nil {
			n, err := strconv.ParseInt(strings.Trim(string(kv.Value.IntValue), `"`), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// awaitSpan polls the file exporter's output for a span called name from
// service, every 50ms (the exporter flushes every 100ms), and returns it.
func (c *collector) awaitSpan(t *testing.T, service, name string) jsonSpan {
	t.Helper()
	var s jsonSpan
	testkit.PollEvery(t, 20*time.Second, 50*time.Millisecond, "a "+name+" span from "+service+" in the collector's file", func() (bool, string) {
		var ok bool
		if s, ok = c.findSpan(t, service, name); ok {
			return true, ""
		}
		data, _ := os.ReadFile(c.file)
		return false, fmt.Sprintf("file:\n%s\ncollector output:\n%s", data, c.output())
	})
	return s
}

func (c *collector) findSpan(t *testing.T, service, name string) (jsonSpan, bool) {
	t.Helper()
	f, err := os.Open(c.file)
	if err != nil {
		return jsonSpan{}, false // not created yet
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var req jsonRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			continue // a line still being written
		}
		for _, rs := range req.ResourceSpans {
			if jsonKVs(rs.Resource.Attributes).stringAttr("service.name") != service {
				continue
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.Name == name {
						return s, true
					}
				}
			}
		}
	}
	return jsonSpan{}, false
}
