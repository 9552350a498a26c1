package reconciletrace

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/stackcapture"
)

func TestReconcileSpanNamesAllocSites(t *testing.T) {
	site := func(fn string, line int, rate float64) heapprofile.Site {
		return heapprofile.Site{Frame: stackcapture.Frame{Function: fn, File: "/src/op/deepcopy.go", Line: line},
			AllocBytesPerSecond: rate, AllocBytes: int64(rate * 10)}
	}
	heap := func() heapprofile.Snapshot {
		return heapprofile.Snapshot{Window: 10 * time.Second, Allocating: []heapprofile.Site{
			site("op.(*Widget).DeepCopy", 42, 2.4e6), site("op.labels", 7, 1e5), site("op.a", 1, 10), site("op.b", 2, 1),
		}}
	}
	tp, rec := newRecorder(t)
	// With a GC cycle inside the reconcile: the top three sites, as an
	// attribute and as events with code.* attributes.
	w := wrap(t, gcReconciler(reconcile.Result{}, nil), nil, WithTracerProvider(tp), WithHeapProfile(heap))
	if _, err := w.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// Without one: no site is named.
	quiet := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp), WithHeapProfile(heap))
	if _, err := quiet.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	a := attrs(spans[0].Attributes())
	got, _ := a["gcprobe.gc.alloc_sites"].([]string)
	want := []string{"op.(*Widget).DeepCopy /src/op/deepcopy.go:42 (2400000 B/s)", "op.labels /src/op/deepcopy.go:7 (100000 B/s)", "op.a /src/op/deepcopy.go:1 (10 B/s)"}
	if len(got) != len(want) {
		t.Fatalf("gcprobe.gc.alloc_sites = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("gcprobe.gc.alloc_sites[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if a["gcprobe.gc.alloc_sites_window_ns"] != int64(10*time.Second) {
		t.Errorf("window %v", a["gcprobe.gc.alloc_sites_window_ns"])
	}
	evs := spans[0].Events()
	if len(evs) != 3 || evs[0].Name != EventAllocSite {
		t.Fatalf("events %+v", evs)
	}
	ea := attrs(evs[0].Attributes)
	if ea["code.function"] != "op.(*Widget).DeepCopy" || ea["code.lineno"] != int64(42) || ea["gcprobe.alloc.bytes_per_second"] != 2.4e6 {
		t.Errorf("event attributes %v", ea)
	}
	if _, ok := attrs(spans[1].Attributes())["gcprobe.gc.alloc_sites"]; ok || len(spans[1].Events()) != 0 {
		t.Errorf("a reconcile without a GC cycle names allocation sites: %v", spans[1].Attributes())
	}
	if _, err := Wrap(gcReconciler(reconcile.Result{}, nil), nil, WithHeapProfile(nil)); err == nil {
		t.Error("WithHeapProfile(nil) accepted")
	}
}

func TestReconcileSpanNamesCauses(t *testing.T) {
	causes := func() []string { return []string{"allocation_driven", "live_heap_growth"} }
	tp, rec := newRecorder(t)
	w := wrap(t, gcReconciler(reconcile.Result{}, nil), nil, WithTracerProvider(tp), WithCauses(causes))
	if _, err := w.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	quiet := wrap(t, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}), nil, WithTracerProvider(tp), WithCauses(causes))
	if _, err := quiet.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	got, _ := attrs(spans[0].Attributes())["gcprobe.gc.causes"].([]string)
	if len(got) != 2 || got[0] != "allocation_driven" || got[1] != "live_heap_growth" {
		t.Errorf("gcprobe.gc.causes = %v", got)
	}
	if _, ok := attrs(spans[1].Attributes())["gcprobe.gc.causes"]; ok {
		t.Errorf("a reconcile without a GC cycle names causes: %v", spans[1].Attributes())
	}
	if _, err := Wrap(gcReconciler(reconcile.Result{}, nil), nil, WithCauses(nil)); err == nil {
		t.Error("WithCauses(nil) accepted")
	}
}
