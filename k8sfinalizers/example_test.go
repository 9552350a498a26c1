package k8sfinalizers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	"github.com/gcprobe/probe/k8sfinalizers"
)

// Set the watcher up next to the controllers of a manager; the manager's
// metrics server then serves the gcprobe_k8s_* series.
func Example() {
	run := func(ctx context.Context) error {
		mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
		if err != nil {
			return err
		}
		w, err := k8sfinalizers.New(
			k8sfinalizers.WithGVKs(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
			k8sfinalizers.WithStuckAfter(10*time.Minute),
			k8sfinalizers.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))),
		)
		if err != nil {
			return err
		}
		if err := w.SetupWithManager(mgr); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
	_ = run // needs a cluster
}

// Options are checked up front: a watcher needs at least one kind.
func ExampleNew() {
	_, err := k8sfinalizers.New()
	fmt.Println(err)

	w, err := k8sfinalizers.New(k8sfinalizers.WithGVKs(corev1.SchemeGroupVersion.WithKind("Secret")))
	fmt.Println(w.GVKs(), err)
	// Output:
	// k8sfinalizers: no GroupVersionKind to watch: pass WithGVKs
	// [/v1, Kind=Secret] <nil>
}

// Watch takes any informer source; here a fake informer feeds it the
// events an API server would send while a deletion waits on a finalizer.
func ExampleWatcher_Watch() {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w, err := k8sfinalizers.New(
		k8sfinalizers.WithGVKs(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
		k8sfinalizers.WithClock(clk),
	)
	if err != nil {
		panic(err)
	}
	inf := controllertest.NewFakeInformer(controllertest.Synced)
	if err := w.Watch(context.Background(), oneInformer{inf}); err != nil {
		panic(err)
	}

	cm := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "settings", UID: "1",
		Finalizers:        []string{"example.com/cleanup"},
		DeletionTimestamp: &metav1.Time{Time: clk.Now()},
	}}
	inf.Add(cm) // deleted, waiting for its finalizer
	clk.Step(90 * time.Second)
	show := func() {
		for _, s := range w.Stats() {
			fmt.Printf("%s %s: %d terminating, oldest %v, %d removals taking %v\n",
				s.GVK.Kind, s.Finalizer, s.Terminating, s.Oldest, s.Removals, s.RemovalTime)
		}
	}
	show()
	inf.Delete(cm) // the finalizer is removed: the object goes
	show()
	// Output:
	// ConfigMap example.com/cleanup: 1 terminating, oldest 1m30s, 0 removals taking 0s
	// ConfigMap example.com/cleanup: 0 terminating, oldest 0s, 1 removals taking 1m30s
}

// oneInformer is an InformerSource that hands out the same informer for
// every kind.
type oneInformer struct{ inf cache.Informer }

func (o oneInformer) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return o.inf, nil
}
