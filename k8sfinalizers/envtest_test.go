package k8sfinalizers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/internal/testkit"
)

// The envtest tests share one control plane (etcd and kube-apiserver,
// ~4 s to start), started by the first test that needs it and stopped by
// TestMain.
var env struct {
	once sync.Once
	e    *envtest.Environment
	cfg  *rest.Config
	err  error
}

// envConfig returns the shared control plane's config, or skips the test
// when the binaries are not there.
func envConfig(t *testing.T) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: `source scripts/testenv.sh` builds etcd and kube-apiserver and sets it, to run this test against a real API server")
	}
	env.once.Do(func() {
		env.e = &envtest.Environment{}
		env.cfg, env.err = env.e.Start()
	})
	if env.err != nil {
		t.Fatalf("starting envtest: %v", env.err)
	}
	return env.cfg
}

// stopEnv stops the shared control plane if a test started it.
func stopEnv() error {
	if env.e == nil || env.cfg == nil {
		return nil
	}
	return env.e.Stop()
}

// newNamespace creates a namespace of its own for a test. envtest runs no
// namespace controller, so it is never emptied: tests never share one.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "k8sfinalizers-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

const (
	quickFinalizer = "test.gcprobe.dev/quick"
	stuckFinalizer = "test.gcprobe.dev/stuck"
)

// quickReconciler removes quickFinalizer from the ConfigMaps of its
// namespace that are being deleted, and never touches stuckFinalizer: the
// controller whose bug the watcher is there to show. It reads metadata
// only, so it shares the watcher's informer.
type quickReconciler struct{ c client.Client }

func (r *quickReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.c.Get(ctx, req.NamespacedName, cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if cm.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(cm, quickFinalizer) {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(cm, quickFinalizer)
	return reconcile.Result{}, client.IgnoreNotFound(r.c.Patch(ctx, cm, patch))
}

// TestEnvtestStuckFinalizer runs the watcher in a manager against a real
// API server: an object whose finalizer the reconciler never removes is
// counted and reported, its age grows, its removal time is recorded when
// the finalizer finally goes; an object deleted cleanly is never counted.
func TestEnvtestStuckFinalizer(t *testing.T) {
	cfg := envConfig(t)
	logs := &testkit.SyncBuffer{}
	reg := prometheus.NewPedanticRegistry()
	const stuckAfter = 2 * time.Second
	w, err := New(
		WithGVKs(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
		WithStuckAfter(stuckAfter),
		WithCheckInterval(100*time.Millisecond),
		WithLogger(slog.New(slog.NewJSONHandler(logs, nil))),
		WithRegisterer(reg),
	)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	ns := newNamespace(t, c)
	err = builder.ControllerManagedBy(mgr).
		Named("quick").
		For(&corev1.ConfigMap{}, builder.OnlyMetadata).
		WithEventFilter(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })).
		Complete(&quickReconciler{c: c})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}

	mk := func(name string, finalizers ...string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
			Data:       map[string]string{"k": "v"},
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		return cm
	}
	stuck := mk("stuck", stuckFinalizer)
	quick := mk("quick", quickFinalizer)
	plain := mk("plain")
	for _, cm := range []*corev1.ConfigMap{stuck, quick, plain} {
		if err := c.Delete(ctx, cm); err != nil {
			t.Fatalf("deleting %s: %v", cm.Name, err)
		}
	}

	// The quick finalizer is removed by the reconciler, the plain object
	// goes at once; the stuck one stays.
	testkit.Poll(t, 30*time.Second, "the quick finalizer's removal and the stuck object's count", func() bool {
		q, _ := stat(w, configMaps, quickFinalizer)
		s, _ := stat(w, configMaps, stuckFinalizer)
		return q.Removals == 1 && q.Terminating == 0 && s.Terminating == 1
	})
	err = c.Get(ctx, client.ObjectKeyFromObject(quick), &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the quick object is still there: %v", err)
	}
	for _, s := range w.Stats() {
		if s.Finalizer != quickFinalizer && s.Finalizer != stuckFinalizer {
			t.Errorf("unexpected series for %q: %+v", s.Finalizer, s)
		}
	}

	// Its age grows.
	first, _ := stat(w, configMaps, stuckFinalizer)
	testkit.Poll(t, 10*time.Second, "the stuck object's age to grow", func() bool {
		s, _ := stat(w, configMaps, stuckFinalizer)
		return s.Oldest >= first.Oldest+time.Second
	})

	// It is reported once, with its namespace and name.
	testkit.Poll(t, 10*time.Second, "the stuck object's log line", func() bool {
		return strings.Contains(logs.String(), `"namespace":"`+ns+`","name":"stuck"`)
	})

	// The series, as the manager's registry serves them.
	want := fmt.Sprintf(`
# HELP gcprobe_k8s_terminating_objects Objects with a deletionTimestamp that still carry this finalizer.
# TYPE gcprobe_k8s_terminating_objects gauge
gcprobe_k8s_terminating_objects{finalizer=%q,group="",kind="ConfigMap",version="v1"} 0
gcprobe_k8s_terminating_objects{finalizer=%q,group="",kind="ConfigMap",version="v1"} 1
`, quickFinalizer, stuckFinalizer)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricTerminatingObjects); err != nil {
		t.Error(err)
	}

	// Someone finally removes the finalizer: the object goes, and the
	// time it took is recorded.
	cur := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stuck), cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	controllerutil.RemoveFinalizer(cur, stuckFinalizer)
	if err := c.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 30*time.Second, "the stuck finalizer's removal", func() bool {
		s, _ := stat(w, configMaps, stuckFinalizer)
		return s.Terminating == 0 && s.Removals == 1
	})
	if s, _ := stat(w, configMaps, stuckFinalizer); s.RemovalTime < stuckAfter {
		t.Errorf("removal time %v, want at least the %v it was stuck", s.RemovalTime, stuckAfter)
	}
	testkit.Poll(t, 10*time.Second, "the release log line", func() bool {
		return strings.Contains(logs.String(), "removed from a stuck object")
	})
	if n := strings.Count(logs.String(), "stuck terminating"); n != 1 {
		t.Errorf("the stuck object was reported %d times, want once:\n%s", n, logs)
	}
}
