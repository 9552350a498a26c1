package k8sfinalizers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
)

var (
	configMaps = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	widgets    = schema.GroupVersionKind{Group: "example.gcprobe.dev", Version: "v1alpha1", Kind: "Widget"}
)

// t0 is the fake clock's start, on a whole second as deletionTimestamps are.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeSource hands out one controllertest.FakeInformer per kind, so that a
// test drives the watcher's handlers directly: the informer's events, with
// no API server and no goroutine.
type fakeSource struct {
	mu   sync.Mutex
	infs map[schema.GroupVersionKind]*controllertest.FakeInformer
	err  error
	// got records the object types asked for: they must be metadata-only.
	got []client.Object
}

func (f *fakeSource) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.got = append(f.got, obj)
	gvk := obj.GetObjectKind().GroupVersionKind()
	if f.infs == nil {
		f.infs = map[schema.GroupVersionKind]*controllertest.FakeInformer{}
	}
	inf, ok := f.infs[gvk]
	if !ok {
		inf = controllertest.NewFakeInformer(controllertest.Synced)
		f.infs[gvk] = inf
	}
	return inf, nil
}

func (f *fakeSource) informer(t *testing.T, gvk schema.GroupVersionKind) *controllertest.FakeInformer {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	inf, ok := f.infs[gvk]
	if !ok {
		t.Fatalf("no informer for %v", gvk)
	}
	return inf
}

// obj makes the metadata of an object of kind gvk; deleted is its
// deletionTimestamp (zero: not deleted).
func obj(gvk schema.GroupVersionKind, ns, name string, deleted time.Time, finalizers ...string) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	o.Namespace, o.Name = ns, name
	o.UID = types.UID(fmt.Sprintf("uid-%s-%s-%s", gvk.Kind, ns, name))
	o.Finalizers = finalizers
	if !deleted.IsZero() {
		dt := metav1.NewTime(deleted)
		o.DeletionTimestamp = &dt
	}
	return o
}

// stat returns the Stat of (gvk, finalizer) and whether there is one.
func stat(w *Watcher, gvk schema.GroupVersionKind, finalizer string) (Stat, bool) {
	for _, s := range w.Stats() {
		if s.GVK == gvk && s.Finalizer == finalizer {
			return s, true
		}
	}
	return Stat{}, false
}

// handlerFor returns a handler of w's for gvk, for events the fake informer
// cannot send (DeletedFinalStateUnknown, objects of the wrong type).
func handlerFor(t *testing.T, w *Watcher, gvk schema.GroupVersionKind) *handler {
	t.Helper()
	for _, ks := range w.kinds {
		if ks.gvk == gvk {
			return &handler{w: w, ks: ks}
		}
	}
	t.Fatalf("the watcher does not watch %v", gvk)
	return nil
}

// contextWithCancel returns a context that the test's end cancels too.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}
