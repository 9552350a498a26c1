package k8sfinalizers

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// newTestWatcher returns a watcher on a fake clock at t0, watching kinds
// through a fakeSource.
func newTestWatcher(t *testing.T, opts ...Option) (*Watcher, *fakeSource, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	w, err := New(append([]Option{WithGVKs(configMaps, widgets), WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	if err := w.Watch(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	return w, src, clk
}

func TestWatchAsksForMetadataOnly(t *testing.T) {
	_, src, _ := newTestWatcher(t)
	if len(src.got) != 2 {
		t.Fatalf("GetInformer called %d times, want 2 (one per kind)", len(src.got))
	}
	for i, want := range []string{"ConfigMap", "Widget"} {
		p, ok := src.got[i].(*metav1.PartialObjectMetadata)
		if !ok {
			t.Fatalf("GetInformer got a %T, want *metav1.PartialObjectMetadata", src.got[i])
		}
		if p.Kind != want {
			t.Errorf("GetInformer #%d for kind %q, want %q", i, p.Kind, want)
		}
	}
}

func TestWatchErrors(t *testing.T) {
	w, err := New(WithGVKs(configMaps))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Watch(t.Context(), nil); err == nil {
		t.Error("Watch(nil): no error")
	}
	boom := errors.New("boom")
	if err := w.Watch(t.Context(), &fakeSource{err: boom}); !errors.Is(err, boom) {
		t.Errorf("Watch with a failing source: got %v, want it to wrap %v", err, boom)
	}
	if err := w.Watch(t.Context(), &fakeSource{}); err != nil {
		t.Fatalf("Watch after a failed Watch: %v", err)
	}
	if err := w.Watch(t.Context(), &fakeSource{}); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("second Watch: got %v, want an 'already watching' error", err)
	}
}

// TestLifecycle follows one object through a deletion its controller is
// slow to finish: counted while terminating, its age growing, then the
// removal time recorded per finalizer.
func TestLifecycle(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	inf := src.informer(t, configMaps)

	live := obj(configMaps, "ns", "a", time.Time{}, "x.example/a", "x.example/b")
	inf.Add(live)
	if got := w.Stats(); len(got) != 0 {
		t.Fatalf("a live object with finalizers is counted: %+v", got)
	}

	clk.Step(10 * time.Second)
	deleting := obj(configMaps, "ns", "a", clk.Now(), "x.example/a", "x.example/b")
	inf.Update(live, deleting)
	for _, f := range []string{"x.example/a", "x.example/b"} {
		s, ok := stat(w, configMaps, f)
		if !ok || s.Terminating != 1 || s.Oldest != 0 || s.Removals != 0 {
			t.Fatalf("after deletion, %s: got %+v (found %v), want 1 terminating, age 0, no removals", f, s, ok)
		}
	}

	clk.Step(30 * time.Second)
	if s, _ := stat(w, configMaps, "x.example/a"); s.Oldest != 30*time.Second {
		t.Errorf("age after 30s: got %v", s.Oldest)
	}
	// A resync (same object) changes nothing.
	inf.Update(deleting, deleting)

	oneLeft := obj(configMaps, "ns", "a", deleting.DeletionTimestamp.Time, "x.example/b")
	inf.Update(deleting, oneLeft)
	a, _ := stat(w, configMaps, "x.example/a")
	b, _ := stat(w, configMaps, "x.example/b")
	if a.Terminating != 0 || a.Removals != 1 || a.RemovalTime != 30*time.Second {
		t.Errorf("x.example/a after its removal: got %+v, want 0 terminating, 1 removal of 30s", a)
	}
	if b.Terminating != 1 || b.Removals != 0 || b.Oldest != 30*time.Second {
		t.Errorf("x.example/b still there: got %+v", b)
	}

	clk.Step(15 * time.Second)
	// The last finalizer goes: the API server deletes the object, and the
	// watch reports the deletion with the object's final state.
	inf.Delete(obj(configMaps, "ns", "a", deleting.DeletionTimestamp.Time))
	b, _ = stat(w, configMaps, "x.example/b")
	if b.Terminating != 0 || b.Removals != 1 || b.RemovalTime != 45*time.Second {
		t.Errorf("x.example/b after the deletion: got %+v, want 0 terminating, 1 removal of 45s", b)
	}
}

func TestCleanDeletionsNeverCount(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	inf := src.informer(t, configMaps)
	tests := []struct {
		name string
		give func()
	}{
		{"no finalizers, deleted at once", func() {
			o := obj(configMaps, "ns", "plain", time.Time{})
			inf.Add(o)
			inf.Delete(o)
		}},
		{"finalizers, never deleted", func() {
			inf.Add(obj(configMaps, "ns", "kept", time.Time{}, "x.example/a"))
		}},
		{"deletionTimestamp without finalizers", func() {
			inf.Add(obj(configMaps, "ns", "going", clk.Now()))
		}},
		{"deleted object never seen terminating", func() {
			handlerFor(t, w, configMaps).OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/unknown", Obj: obj(configMaps, "ns", "unknown", time.Time{})})
		}},
		{"not an object", func() {
			handlerFor(t, w, configMaps).OnAdd(&metav1.PartialObjectMetadataList{}, false)
			handlerFor(t, w, configMaps).OnUpdate(nil, "not an object")
			handlerFor(t, w, configMaps).OnDelete(nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give()
			if got := w.Stats(); len(got) != 0 {
				t.Errorf("counted: %+v", got)
			}
		})
	}
}

func TestDeletedFinalStateUnknownCountsRemaining(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	inf := src.informer(t, widgets)
	o := obj(widgets, "", "cluster-scoped", clk.Now(), "x.example/a", "x.example/b")
	inf.Add(o)
	clk.Step(2 * time.Minute)
	// The watch missed the deletion; the relist reports the last state.
	handlerFor(t, w, widgets).OnDelete(toolscache.DeletedFinalStateUnknown{Key: "cluster-scoped", Obj: o})
	for _, f := range []string{"x.example/a", "x.example/b"} {
		s, _ := stat(w, widgets, f)
		if s.Terminating != 0 || s.Removals != 1 || s.RemovalTime != 2*time.Minute {
			t.Errorf("%s: got %+v, want 0 terminating and one removal of 2m", f, s)
		}
	}
}

func TestOldestAndCounts(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	cms := src.informer(t, configMaps)
	start := clk.Now()
	for i, name := range []string{"a", "b", "c"} {
		cms.Add(obj(configMaps, "ns", name, start.Add(time.Duration(i)*time.Minute), "x.example/a"))
	}
	// Another kind with the same finalizer is counted apart.
	src.informer(t, widgets).Add(obj(widgets, "ns", "w", start.Add(2*time.Minute), "x.example/a"))
	clk.Step(5 * time.Minute)
	if s, _ := stat(w, configMaps, "x.example/a"); s.Terminating != 3 || s.Oldest != 5*time.Minute {
		t.Errorf("configmaps: got %+v, want 3 terminating, oldest 5m", s)
	}
	if s, _ := stat(w, widgets, "x.example/a"); s.Terminating != 1 || s.Oldest != 3*time.Minute {
		t.Errorf("widgets: got %+v, want 1 terminating, oldest 3m", s)
	}
}

func TestFinalizerNamesBounded(t *testing.T) {
	w, src, clk := newTestWatcher(t, WithMaxFinalizerNames(2))
	inf := src.informer(t, configMaps)
	inf.Add(obj(configMaps, "ns", "a", clk.Now(), "f1", "f2"))
	inf.Add(obj(configMaps, "ns", "b", clk.Now(), "f3", "f4", "f2"))
	got := map[string]int{}
	var order []string
	for _, s := range w.Stats() {
		got[s.Finalizer] = s.Terminating
		order = append(order, s.Finalizer)
	}
	want := map[string]int{"f1": 1, "f2": 2, OtherFinalizer: 1}
	if len(got) != len(want) {
		t.Fatalf("got series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("finalizer %q: got %d terminating, want %d", k, got[k], v)
		}
	}
	if order[len(order)-1] != OtherFinalizer {
		t.Errorf("order %v: want %q last", order, OtherFinalizer)
	}
	// Removing both folded names records two removals under other.
	inf.Delete(obj(configMaps, "ns", "b", clk.Now()))
	if s, _ := stat(w, configMaps, OtherFinalizer); s.Terminating != 0 || s.Removals != 2 {
		t.Errorf("other after deletion: got %+v, want 0 terminating, 2 removals", s)
	}
}

func TestClockSkewClampedToZero(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	inf := src.informer(t, configMaps)
	// The API server's clock runs 3 s ahead of ours.
	o := obj(configMaps, "ns", "a", clk.Now().Add(3*time.Second), "x.example/a")
	inf.Add(o)
	if s, _ := stat(w, configMaps, "x.example/a"); s.Oldest != 0 {
		t.Errorf("age with the server ahead: got %v, want 0", s.Oldest)
	}
	inf.Delete(o)
	if s, _ := stat(w, configMaps, "x.example/a"); s.Removals != 1 || s.RemovalTime != 0 {
		t.Errorf("removal with the server ahead: got %+v, want one removal of 0s", s)
	}
}

// TestRecreatedObjectIsNew checks that objects are told apart by UID: a
// new object with the name of a deleted one starts from scratch.
func TestRecreatedObjectIsNew(t *testing.T) {
	w, src, clk := newTestWatcher(t)
	inf := src.informer(t, configMaps)
	old := obj(configMaps, "ns", "a", clk.Now(), "x.example/a")
	inf.Add(old)
	clk.Step(time.Minute)
	fresh := obj(configMaps, "ns", "a", clk.Now(), "x.example/a")
	fresh.UID = "another-uid"
	inf.Add(fresh)
	if s, _ := stat(w, configMaps, "x.example/a"); s.Terminating != 2 || s.Oldest != time.Minute {
		t.Errorf("got %+v, want both objects counted, the oldest 1m", s)
	}
}
