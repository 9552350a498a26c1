package tracing

import (
	"context"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// newRecorder returns a tracer provider that records every span, shut down
// when the test ends.
func newRecorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("TracerProvider.Shutdown: %v", err)
		}
	})
	return tp, rec
}

// newReporter returns a Reporter that the test stops.
func newReporter(t testing.TB, opts ...Option) *Reporter {
	t.Helper()
	r, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// newWatcher returns a finalizer ledger of the test's own, closed at its end.
func newWatcher(t testing.TB, opts ...finalizerwatch.Option) *finalizerwatch.Watcher {
	t.Helper()
	w, err := finalizerwatch.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// spansNamed returns the ended spans called name, in the order they ended.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs turns attributes into a map for comparison, failing on a key set
// twice.
func attrs(t testing.TB, kvs []attribute.KeyValue) map[string]any {
	t.Helper()
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		if _, dup := m[string(kv.Key)]; dup {
			t.Errorf("attribute %s set twice", kv.Key)
		}
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// assertAttrs fails unless got holds exactly the attributes of want.
func assertAttrs(t testing.TB, what string, got, want map[string]any) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: attribute %s missing, want %#v", what, k, v)
			continue
		}
		if !equalValue(g, v) {
			t.Errorf("%s: %s = %#v, want %#v", what, k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %#v", what, k, v)
		}
	}
}

func equalValue(a, b any) bool {
	return reflect.DeepEqual(a, b)
}

// newSampler returns a sampler the test stops. It is not started: tests
// drive it with Sample.
func newSampler(t testing.TB, opts ...memstats.Option) *memstats.Sampler {
	t.Helper()
	s, err := memstats.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func noopProvider() trace.TracerProvider { return noop.NewTracerProvider() }
