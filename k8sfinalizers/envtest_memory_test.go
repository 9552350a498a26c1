package k8sfinalizers

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// memObjects is how many ConfigMaps TestEnvtestInformerMemory creates; the
// figures are extrapolated to 10 000 (per-object costs are linear: the
// store is a map of pointers).
const memObjects = 2000

// TestEnvtestInformerMemory measures what watching ConfigMaps' metadata
// costs the program against a real API server: the heap a metadata-only
// informer holds once synced (with and without managedFields), next to a
// full-object informer of the same ConfigMaps for comparison, plus the
// watcher's handlers. Each ConfigMap has 1 KiB of data, a few labels and a
// finalizer, like a typical small object an operator manages.
func TestEnvtestInformerMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 2000 objects and measures the heap; not in -short")
	}
	cfg := envConfig(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t, c)
	start := time.Now()
	createConfigMaps(t, c, ns, memObjects)
	t.Logf("created %d ConfigMaps in %v", memObjects, time.Since(start).Round(time.Millisecond))

	for _, tt := range []struct {
		name      string
		obj       client.Object
		strip     bool
		watcher   bool
		maxPerObj float64 // bytes per object, a loose guard on the measured figure
	}{
		{"metadata-only informer + watcher, managedFields stripped", &metav1.PartialObjectMetadata{}, true, true, 2000},
		{"metadata-only informer + watcher", &metav1.PartialObjectMetadata{}, false, true, 4000},
		{"full-object informer (for comparison)", &corev1.ConfigMap{}, false, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			per := informerHeap(t, cfg, ns, tt.obj, tt.strip, tt.watcher)
			t.Logf("%s: %.0f bytes per object: %.1f MiB for %d objects, %.1f MiB extrapolated to 10 000",
				tt.name, per, per*memObjects/(1<<20), memObjects, per*10000/(1<<20))
			if tt.maxPerObj > 0 && per > tt.maxPerObj {
				t.Errorf("%.0f bytes per object, want at most %.0f", per, tt.maxPerObj)
			}
		})
	}
}

// createConfigMaps creates n ConfigMaps in ns, a few at a time.
func createConfigMaps(t *testing.T, c client.Client, ns string, n int) {
	t.Helper()
	data := strings.Repeat("x", 1024)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Namespace:  ns,
						Name:       fmt.Sprintf("settings-%05d", i),
						Labels:     map[string]string{"app.kubernetes.io/name": "demo", "gcprobe-demo": "true"},
						Finalizers: []string{"example.gcprobe.dev/cleanup"},
					},
					Data: map[string]string{"config.yaml": data},
				}
				if err := c.Create(t.Context(), cm); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating ConfigMaps: %v", err)
	}
}

// informerHeap starts a cache with one informer for obj's kind in ns
// (metadata-only for a PartialObjectMetadata), with the watcher's handlers
// if asked, waits for it to sync, and returns the heap it holds per object.
func informerHeap(t *testing.T, cfg *rest.Config, ns string, obj client.Object, strip, withWatcher bool) float64 {
	t.Helper()
	opts := cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	if strip {
		opts.DefaultTransform = cache.TransformStripManagedFields()
	}
	ca, err := cache.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
		p.SetGroupVersionKind(configMaps)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cache: %v", err)
		}
	}()

	before := heapAfterGC()
	var w *Watcher
	if withWatcher {
		if w, err = New(WithGVKs(configMaps)); err != nil {
			t.Fatal(err)
		}
		if err := w.Watch(ctx, ca); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := ca.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- ca.Start(ctx) }()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	// The watcher's handlers too: stopping the cache before they have
	// seen the initial list leaves controller-runtime's multi-namespace
	// registration goroutine waiting for ever (goleak finds it).
	if w != nil && !toolscache.WaitForCacheSync(ctx.Done(), w.HasSynced) {
		t.Fatal("the watcher's handlers did not sync")
	}
	after := heapAfterGC()
	runtime.KeepAlive(w)
	runtime.KeepAlive(inf)
	return (float64(after) - float64(before)) / memObjects
}
