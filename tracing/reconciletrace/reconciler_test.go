package reconciletrace

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/memstats"
)

func newRecorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func attrs(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func wrap(t testing.TB, r reconcile.Reconciler, s *memstats.Sampler, opts ...Option) reconcile.Reconciler {
	t.Helper()
	w, err := Wrap(r, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// sink keeps the fake reconciler's allocations from being optimised away.
var sink [][]byte

const (
	allocChunk  = 256 << 10 // large objects: counted by the runtime at once
	allocChunks = 16
)

// gcReconciler allocates allocChunks*allocChunk bytes and runs a GC cycle
// inside each reconcile, as a reconciler under memory pressure would.
func gcReconciler(res reconcile.Result, err error) reconcile.Func {
	return func(context.Context, reconcile.Request) (reconcile.Result, error) {
		for range allocChunks {
			sink = append(sink, make([]byte, allocChunk))
		}
		runtime.GC()
		sink = nil
		return res, err
	}
}

var req = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "widget-1"}}

func TestReconcileSpanCarriesGC(t *testing.T) {
	running, err := memstats.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(running.Stop)
	for _, tc := range []struct {
		name    string
		sampler *memstats.Sampler
	}{
		{"running sampler", running},
		{"nil sampler", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := newRecorder(t)
			r := wrap(t, gcReconciler(reconcile.Result{RequeueAfter: 5 * time.Second}, nil), tc.sampler,
				WithTracerProvider(tp), WithControllerName("widgets"))
			res, err := r.Reconcile(context.Background(), req)
			if err != nil || res.RequeueAfter != 5*time.Second {
				t.Fatalf("Reconcile = %+v, %v", res, err)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != "reconcile" || s.SpanKind().String() != "internal" || s.Status().Code != codes.Unset {
				t.Errorf("span %q kind %v status %v", s.Name(), s.SpanKind(), s.Status())
			}
			a := attrs(s.Attributes())
			for k, want := range map[string]any{
				"gcprobe.controller.name":            "widgets",
				"k8s.namespace.name":                 "ns",
				"gcprobe.reconcile.name":             "widget-1",
				"gcprobe.reconcile.requeue":          true,
				"gcprobe.reconcile.requeue_after_ns": int64(5 * time.Second),
			} {
				if a[k] != want {
					t.Errorf("%s = %#v, want %#v", k, a[k], want)
				}
			}
			cycles, _ := a["gcprobe.gc.cycles"].(int64)
			pauses, _ := a["gcprobe.gc.pauses"].(int64)
			total, _ := a["gcprobe.gc.pause_total_ns"].(int64)
			longest, _ := a["gcprobe.gc.pause_max_ns"].(int64)
			allocated, _ := a["gcprobe.heap.allocated_bytes"].(int64)
			if cycles < 1 || pauses < 1 || pauses > cycles || total <= 0 || longest <= 0 || longest > total {
				t.Errorf("cycles %d pauses %d total %dns max %dns", cycles, pauses, total, longest)
			}
			if allocated < allocChunks*allocChunk {
				t.Errorf("allocated %d bytes, want >= %d", allocated, allocChunks*allocChunk)
			}
			if _, ok := a["gcprobe.reconcile.terminal_error"]; ok {
				t.Error("terminal_error set on success")
			}
			if d := s.EndTime().Sub(s.StartTime()); time.Duration(total) > d {
				t.Errorf("pauses total %v in a %v span", time.Duration(total), d)
			}
		})
	}
}

func TestReconcileWithoutGC(t *testing.T) {
	tp, rec := newRecorder(t)
	r := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp))
	// A GC may run at any time; retry until a reconcile ran without one.
	for {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		spans := rec.Ended()
		a := attrs(spans[len(spans)-1].Attributes())
		if a["gcprobe.gc.cycles"] != int64(0) {
			continue
		}
		if a["gcprobe.gc.pauses"] != int64(0) || a["gcprobe.gc.pause_total_ns"] != int64(0) ||
			a["gcprobe.reconcile.requeue"] != false || a["gcprobe.reconcile.requeue_after_ns"] != int64(0) {
			t.Errorf("attributes %v", a)
		}
		if _, ok := a["gcprobe.controller.name"]; ok {
			t.Error("controller name set without WithControllerName")
		}
		return
	}
}

func TestReconcileError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		terminal bool
	}{
		{"error", errors.New("widget is on fire"), false},
		{"terminal", reconcile.TerminalError(errors.New("widget is on fire")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := newRecorder(t)
			r := wrap(t, gcReconciler(reconcile.Result{}, tc.err), nil, WithTracerProvider(tp))
			if _, err := r.Reconcile(context.Background(), req); !errors.Is(err, tc.err) {
				t.Fatalf("Reconcile error %v, want %v", err, tc.err)
			}
			s := rec.Ended()[0]
			if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "widget is on fire") {
				t.Errorf("status %+v", s.Status())
			}
			if a := attrs(s.Attributes()); a["gcprobe.reconcile.terminal_error"] != tc.terminal {
				t.Errorf("terminal_error = %v, want %v", a["gcprobe.reconcile.terminal_error"], tc.terminal)
			}
			var recorded bool
			for _, e := range s.Events() {
				if e.Name == "exception" && strings.Contains(attrs(e.Attributes)["exception.message"].(string), "on fire") {
					recorded = true
				}
			}
			if !recorded {
				t.Errorf("no exception event: %v", s.Events())
			}
			if a := attrs(s.Attributes()); a["gcprobe.gc.cycles"].(int64) < 1 {
				t.Errorf("error path lost the GC figures: %v", a)
			}
		})
	}
}

func TestReconcilePanic(t *testing.T) {
	tp, rec := newRecorder(t)
	r := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		panic("widget exploded")
	}), nil, WithTracerProvider(tp))
	func() {
		defer func() {
			if v := recover(); v != "widget exploded" {
				t.Errorf("recovered %v, want the reconciler's panic value", v)
			}
		}()
		_, _ = r.Reconcile(context.Background(), req)
		t.Error("Reconcile returned instead of panicking on")
	}()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	s := spans[0]
	if s.Status().Code != codes.Error || attrs(s.Attributes())["gcprobe.reconcile.panic"] != true {
		t.Errorf("status %+v attributes %v", s.Status(), attrs(s.Attributes()))
	}
}

func TestEnrichesRecordingSpan(t *testing.T) {
	tp, rec := newRecorder(t)
	ctx, outer := tp.Tracer("outer").Start(context.Background(), "controller.reconcile")
	var inner bool
	r := wrap(t, reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		inner = oteltrace.SpanFromContext(ctx).SpanContext().SpanID() == outer.SpanContext().SpanID()
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp), WithControllerName("widgets"))
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if !inner {
		t.Error("the reconciler did not run in the outer span's context")
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans ended before the outer one; the wrapper must not end a span it did not start", n)
	}
	outer.End()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want only the outer one", len(spans))
	}
	a := attrs(spans[0].Attributes())
	if a["gcprobe.reconcile.name"] != "widget-1" || a["gcprobe.controller.name"] != "widgets" {
		t.Errorf("outer span attributes %v", a)
	}
	if _, ok := a["gcprobe.gc.cycles"]; !ok {
		t.Errorf("outer span lacks gcprobe.gc.cycles: %v", a)
	}
}

func TestWithNewSpan(t *testing.T) {
	tp, rec := newRecorder(t)
	ctx, outer := tp.Tracer("outer").Start(context.Background(), "outer")
	r := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp), WithNewSpan(), WithSpanName("widget.reconcile"))
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	outer.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if spans[0].Name() != "widget.reconcile" || spans[0].Parent().SpanID() != outer.SpanContext().SpanID() {
		t.Errorf("span %q with parent %v, want widget.reconcile under %v", spans[0].Name(), spans[0].Parent().SpanID(), outer.SpanContext().SpanID())
	}
}

func TestSampledOut(t *testing.T) {
	var ran bool
	r := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		ran = true
		return reconcile.Result{Requeue: true}, nil
	}), nil, WithTracerProvider(noop.NewTracerProvider()))
	res, err := r.Reconcile(context.Background(), req)
	if !ran || err != nil || !res.Requeue { //lint:ignore SA1019 checking pass-through
		t.Errorf("Reconcile = %+v, %v, ran %v", res, err, ran)
	}
}

// typedRequest is a request type of a typed controller.
type typedRequest struct{ cluster, key string }

func (r typedRequest) String() string { return r.cluster + "/" + r.key }

func TestWrapTyped(t *testing.T) {
	tp, rec := newRecorder(t)
	r, err := WrapTyped[typedRequest](reconcile.TypedFunc[typedRequest](func(context.Context, typedRequest) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), typedRequest{"east", "widget-2"}); err != nil {
		t.Fatal(err)
	}
	if a := attrs(rec.Ended()[0].Attributes()); a["gcprobe.reconcile.request"] != "east/widget-2" {
		t.Errorf("attributes %v", a)
	}
}

func TestWrapErrors(t *testing.T) {
	ok := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	tests := []struct {
		name string
		r    reconcile.Reconciler
		opt  Option
		want string
	}{
		{"nil reconciler", nil, nil, "nil Reconciler"},
		{"nil option", ok, nil, "reconciletrace: Wrap: nil Option"},
		{"nil provider", ok, WithTracerProvider(nil), "WithTracerProvider"},
		{"empty span name", ok, WithSpanName(""), "WithSpanName"},
		{"empty controller", ok, WithControllerName(""), "WithControllerName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []Option
			if tt.r != nil {
				opts = []Option{tt.opt}
			}
			w, err := Wrap(tt.r, nil, opts...)
			if err == nil || w != nil {
				t.Fatalf("Wrap = %v, %v; want an error", w, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
}

// The measurements a reconcile adds allocate nothing: two pooled
// metrics.Read calls, and no pause lookup when no cycle ended.
func TestMeasurementAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	readGC() // fill the pool
	if n := testing.AllocsPerRun(100, func() {
		start := readGC()
		end := readGC()
		end.cycles = start.cycles
		_ = pauses(nil, start, end)
	}); n != 0 {
		t.Errorf("%v allocations per reconcile's measurements, want 0", n)
	}
}

func TestOverlaps(t *testing.T) {
	base := time.Unix(1000, 0)
	tests := []struct {
		name string
		end  time.Time
		d    time.Duration
		want bool
	}{
		{"inside", base.Add(5 * time.Millisecond), time.Millisecond, true},
		{"ends before", base.Add(-time.Millisecond), time.Millisecond, false},
		{"straddles start", base.Add(time.Millisecond), 2 * time.Millisecond, true},
		{"starts after", base.Add(12 * time.Millisecond), time.Millisecond, false},
		{"straddles end", base.Add(11 * time.Millisecond), 2 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := overlaps(tt.end, tt.d, base, base.Add(10*time.Millisecond)); got != tt.want {
				t.Errorf("overlaps = %v, want %v", got, tt.want)
			}
		})
	}
}
