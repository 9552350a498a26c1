package k8sfinalizers

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gcprobe/probe/internal/testkit"
)

// reporters captures everything a watcher reports about stuck objects.
type reporters struct {
	logs  *testkit.SyncBuffer
	spans *tracetest.SpanRecorder
	stuck chan StuckObject
}

func newReporters(t *testing.T) (*reporters, []Option) {
	r := &reporters{logs: &testkit.SyncBuffer{}, spans: tracetest.NewSpanRecorder(), stuck: make(chan StuckObject, 100)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return r, []Option{
		WithLogger(slog.New(slog.NewJSONHandler(r.logs, nil))),
		WithTracerProvider(tp),
		WithStuckFunc(func(s StuckObject) { r.stuck <- s }),
	}
}

// logLines decodes the JSON log lines whose msg contains substr.
func (r *reporters) logLines(t *testing.T, substr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(r.logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(m["msg"].(string), substr) {
			out = append(out, m)
		}
	}
	return out
}

func (r *reporters) drain() []StuckObject {
	var out []StuckObject
	for {
		select {
		case s := <-r.stuck:
			out = append(out, s)
		default:
			return out
		}
	}
}

func TestStuckReportedOncePerObject(t *testing.T) {
	r, opts := newReporters(t)
	w, src, clk := newTestWatcher(t, append(opts, WithStuckAfter(5*time.Minute))...)
	cms := src.informer(t, configMaps)
	start := clk.Now()
	cms.Add(obj(configMaps, "ns", "old", start, "x.example/stuck"))
	cms.Add(obj(configMaps, "ns", "young", start.Add(4*time.Minute), "x.example/stuck"))
	cms.Add(obj(configMaps, "ns", "alive", time.Time{}, "x.example/stuck"))

	clk.Step(4*time.Minute + 59*time.Second)
	w.check()
	if got := r.drain(); len(got) != 0 {
		t.Fatalf("reported before the threshold: %+v", got)
	}

	clk.Step(time.Second)
	w.check()
	got := r.drain()
	if len(got) != 1 || got[0].Namespace != "ns" || got[0].Name != "old" || got[0].Age != 5*time.Minute ||
		!slices.Equal(got[0].Finalizers, []string{"x.example/stuck"}) || got[0].GVK != configMaps {
		t.Fatalf("at the threshold: got %+v, want ns/old only, age 5m", got)
	}
	w.check()
	if got := r.drain(); len(got) != 0 {
		t.Fatalf("reported twice: %+v", got)
	}

	clk.Step(4 * time.Minute)
	w.check()
	if got := r.drain(); len(got) != 1 || got[0].Name != "young" {
		t.Fatalf("later: got %+v, want ns/young", got)
	}

	// The log: one Warn line per object, with namespace and name.
	warns := r.logLines(t, "stuck terminating")
	if len(warns) != 2 {
		t.Fatalf("got %d stuck log lines, want 2:\n%s", len(warns), r.logs)
	}
	if l := warns[0]; l["level"] != "WARN" || l["namespace"] != "ns" || l["name"] != "old" || l["kind"] != "ConfigMap" ||
		l["deletion_timestamp"] != start.Format(time.RFC3339) {
		t.Errorf("first log line: %v", l)
	}

	// The spans: one per check that found objects, an event per object.
	spans := r.spans.Ended()
	if len(spans) != 2 {
		t.Fatalf("got %d spans, want 2", len(spans))
	}
	s := spans[0]
	if s.Name() != SpanStuckObjects || len(s.Events()) != 1 || s.Events()[0].Name != EventStuckObject {
		t.Fatalf("span %q with events %v", s.Name(), s.Events())
	}
	attrs := attribute.NewSet(s.Events()[0].Attributes...)
	for k, want := range map[attribute.Key]string{
		"k8s.namespace.name": "ns",
		"k8s.object.name":    "old",
		"k8s.object.kind":    "ConfigMap",
		"k8s.object.version": "v1",
		"k8s.object.uid":     "uid-ConfigMap-ns-old",
	} {
		if v, ok := attrs.Value(k); !ok || v.AsString() != want {
			t.Errorf("event attribute %s: got %v, want %q", k, v.Emit(), want)
		}
	}
	if v, _ := attrs.Value("gcprobe.k8s.terminating_ns"); v.AsInt64() != int64(5*time.Minute) {
		t.Errorf("terminating_ns: got %v", v.Emit())
	}

	// Once its finalizer goes, a reported object is logged as released.
	cms.Delete(obj(configMaps, "ns", "old", start))
	if rel := r.logLines(t, "removed from a stuck object"); len(rel) != 1 || rel[0]["name"] != "old" || rel[0]["level"] != "INFO" {
		t.Errorf("release log lines: %v", rel)
	}
}

func TestStuckReportsBoundedPerCheck(t *testing.T) {
	r, opts := newReporters(t)
	w, src, clk := newTestWatcher(t, append(opts, WithStuckAfter(time.Minute), WithMaxReportsPerCheck(2))...)
	cms := src.informer(t, configMaps)
	start := clk.Now()
	for i, name := range []string{"e", "d", "c", "b", "a"} {
		cms.Add(obj(configMaps, "ns", name, start.Add(time.Duration(i)*time.Second), "x.example/stuck"))
	}
	clk.Step(time.Hour)
	var order []string
	for range 3 {
		w.check()
		for _, s := range r.drain() {
			order = append(order, s.Name)
		}
	}
	// Oldest first, two per check.
	if want := []string{"e", "d", "c", "b", "a"}; !slices.Equal(order, want) {
		t.Errorf("reported %v, want %v", order, want)
	}
	if p := r.logLines(t, "more objects stuck"); len(p) != 2 || p[0]["pending"] != 3.0 || p[1]["pending"] != 1.0 {
		t.Errorf("pending log lines: %v", p)
	}
	spans := r.spans.Ended()
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want 3", len(spans))
	}
	spanAttrs := attribute.NewSet(spans[0].Attributes()...)
	if v, _ := spanAttrs.Value("gcprobe.k8s.stuck_objects.pending"); v.AsInt64() != 3 {
		t.Errorf("first span's pending: %v", v.Emit())
	}
}

// TestStartChecksOnTick runs the real loop: a check per tick of the clock.
func TestStartChecksOnTick(t *testing.T) {
	r, opts := newReporters(t)
	w, src, clk := newTestWatcher(t, append(opts,
		WithStuckAfter(time.Minute), WithCheckInterval(10*time.Second),
		WithRegisterer(prometheus.NewRegistry()))...)
	src.informer(t, configMaps).Add(obj(configMaps, "ns", "a", clk.Now(), "x.example/stuck"))
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	testkit.Poll(t, 5*time.Second, "Start's ticker", clk.HasWaiters)
	clk.Step(time.Minute)
	select {
	case s := <-r.stuck:
		if s.Name != "a" {
			t.Errorf("reported %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report after the clock passed the threshold")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

func TestSilentByDefault(t *testing.T) {
	w, src, clk := newTestWatcher(t, WithStuckAfter(time.Minute))
	src.informer(t, configMaps).Add(obj(configMaps, "ns", "a", clk.Now(), "x.example/stuck"))
	clk.Step(time.Hour)
	w.check() // no logger, no tracer, no callback: nothing to do, nothing to panic on
	if s, _ := stat(w, configMaps, "x.example/stuck"); s.Terminating != 1 {
		t.Errorf("got %+v", s)
	}
}
