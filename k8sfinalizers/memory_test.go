package k8sfinalizers

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds on the watcher's own memory per watched object, checked by
// TestMemoryOwnState and quoted in the package documentation: what the
// handlers keep beyond the informer's store.
const (
	maxBytesPerTerminating = 400 // measured ≈ 200 B: map slot, object entry, finalizer and label slices
	maxBytesPerLive        = 8   // measured 0: live objects are not tracked
)

// synthetic returns n ConfigMap metadata objects shaped like the informer's
// (name, namespace, UID, resource version, labels, one finalizer), all
// terminating if deleted is set.
func synthetic(n int, deleted bool) []*metav1.PartialObjectMetadata {
	objs := make([]*metav1.PartialObjectMetadata, n)
	dt := metav1.NewTime(t0)
	for i := range objs {
		o := &metav1.PartialObjectMetadata{}
		o.SetGroupVersionKind(configMaps)
		o.Namespace = fmt.Sprintf("team-%d", i%50)
		o.Name = fmt.Sprintf("settings-%06d", i)
		o.UID = types.UID(fmt.Sprintf("6f1c1d9e-0000-4000-8000-%012d", i))
		o.ResourceVersion = fmt.Sprint(100000 + i)
		o.Labels = map[string]string{"app": "demo", "gcprobe-demo": "true"}
		o.Finalizers = []string{"example.gcprobe.dev/cleanup"}
		if deleted {
			o.DeletionTimestamp = &dt
		}
		objs[i] = o
	}
	return objs
}

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryOwnState feeds the handlers 10 000 synthetic objects, as an
// informer's initial list would, and measures what the watcher itself
// keeps: the objects belong to the informer's store and are allocated
// before the measurement starts.
func TestMemoryOwnState(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap; not in -short")
	}
	const n = 10000
	for _, tt := range []struct {
		name     string
		deleted  bool
		maxBytes float64
	}{
		{"live objects with a finalizer", false, maxBytesPerLive},
		{"terminating objects with a finalizer", true, maxBytesPerTerminating},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs := synthetic(n, tt.deleted)
			w, _, _ := newTestWatcher(t)
			h := handlerFor(t, w, configMaps)
			before := heapAfterGC()
			for _, o := range objs {
				h.OnAdd(o, true)
			}
			after := heapAfterGC()
			runtime.KeepAlive(objs)
			runtime.KeepAlive(w)
			per := (float64(after) - float64(before)) / n
			t.Logf("watcher's own state for %d %s: %.0f bytes per object, %.2f MiB in all",
				n, tt.name, per, per*n/(1<<20))
			if per > tt.maxBytes {
				t.Errorf("%.0f bytes per object, want at most %.0f", per, tt.maxBytes)
			}
			if tt.deleted {
				if s, _ := stat(w, configMaps, "example.gcprobe.dev/cleanup"); s.Terminating != n {
					t.Errorf("counted %d terminating, want %d", s.Terminating, n)
				}
			}
		})
	}
}

// BenchmarkCollect10000Terminating is a scrape's cost with 10 000
// terminating objects: one walk over them.
func BenchmarkCollect10000Terminating(b *testing.B) {
	w, err := New(WithGVKs(configMaps))
	if err != nil {
		b.Fatal(err)
	}
	ks := w.kinds[0]
	h := &handler{w: w, ks: ks}
	for _, o := range synthetic(10000, true) {
		h.OnAdd(o, true)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(w)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdate is the handlers' cost per event for an object that is not
// terminating (nearly every event in a cluster), and for a resync of a
// terminating one.
func BenchmarkUpdate(b *testing.B) {
	for _, deleted := range []bool{false, true} {
		b.Run(fmt.Sprintf("terminating=%v", deleted), func(b *testing.B) {
			w, err := New(WithGVKs(configMaps))
			if err != nil {
				b.Fatal(err)
			}
			h := &handler{w: w, ks: w.kinds[0]}
			objs := synthetic(1000, deleted)
			for _, o := range objs {
				h.OnAdd(o, true)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				o := objs[i%len(objs)]
				h.OnUpdate(o, o)
				i++
			}
		})
	}
}
