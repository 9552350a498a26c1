package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The operator whose own GC causes gcprobe names (gccause_e2e_test.go):
// many ConfigMaps, each with the large managedFields that server-side
// apply from several field managers leaves; a manager whose cache keeps
// them (no transform); a reconciler that lists every ConfigMap from the
// cache on every reconcile, deep-copied by the default client.
const (
	// scenarioConfigMaps is how many ConfigMaps the namespace holds.
	scenarioConfigMaps = 1500
	// scenarioManagers field managers each apply scenarioKeys data keys
	// of their own to every ConfigMap, so each ConfigMap carries
	// scenarioManagers managedFields entries listing those keys.
	scenarioManagers = 4
	scenarioKeys     = 16
	// scenarioTrigger is the ConfigMap whose reconcile lists them all,
	// again every scenarioPeriod.
	scenarioTrigger = "gccause-0000"
	scenarioPeriod  = 100 * time.Millisecond
)

// scenarioKey is the name of manager m's k-th data key: long, as the
// names of real settings are, since managedFields repeat every name.
func scenarioKey(m, k int) string {
	return fmt.Sprintf("manager-%d-owns-this-rather-descriptive-setting-%02d", m, k)
}

// seedConfigMaps creates the namespace's ConfigMaps by server-side apply,
// each of scenarioManagers field managers applying its own keys, a few
// requests at a time.
func seedConfigMaps(t *testing.T, cfg *rest.Config, ns string) {
	t.Helper()
	// client-go's default client-side rate limit (5 requests a second)
	// would make 6000 requests take 20 minutes.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				name := fmt.Sprintf("gccause-%04d", i)
				for m := range scenarioManagers {
					data := make(map[string]string, scenarioKeys)
					for k := range scenarioKeys {
						data[scenarioKey(m, k)] = "on"
					}
					ac := corev1ac.ConfigMap(name, ns).WithData(data)
					if err := c.Apply(ctx, ac, client.FieldOwner(fmt.Sprintf("gcprobe-e2e-manager-%d", m))); err != nil {
						err = fmt.Errorf("apply %s as manager %d: %w", name, m, err)
						failed.CompareAndSwap(nil, &err)
					}
				}
			}
		})
	}
	for i := range scenarioConfigMaps {
		if failed.Load() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
}

// listAllReconciler lists every ConfigMap of its namespace from the cache
// on every reconcile, as a reconciler that computes something over all of
// them does; with unsafe, read-only, without deep copies.
type listAllReconciler struct {
	client.Client
	ns     string
	unsafe bool
	lists  atomic.Int64
	seen   atomic.Int64 // ConfigMaps in the latest list
}

// Reconcile lists the namespace's ConfigMaps and comes back in
// scenarioPeriod.
func (r *listAllReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list corev1.ConfigMapList
	opts := []client.ListOption{client.InNamespace(r.ns)}
	if r.unsafe {
		opts = append(opts, client.UnsafeDisableDeepCopy)
	}
	if err := r.List(ctx, &list, opts...); err != nil { // marker: gccause-list
		return reconcile.Result{}, err
	}
	r.seen.Store(int64(len(list.Items)))
	r.lists.Add(1)
	return reconcile.Result{RequeueAfter: scenarioPeriod}, nil
}

// runScenarioManager starts the scenario's manager on ns, fixed or not:
// fixed, the cache strips managedFields (cache.TransformStripManagedFields
// as its DefaultTransform) and the reconciler lists without deep copies
// (client.UnsafeDisableDeepCopy). It returns the reconciler and a stop
// function that waits for the manager to end.
func runScenarioManager(t *testing.T, cfg *rest.Config, ns string, fixed bool) (*listAllReconciler, func()) {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	copts := cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	if fixed {
		copts.DefaultTransform = cache.TransformStripManagedFields()
	}
	skipNameValidation := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  copts,
		// Two managers in one test binary register controllers of the
		// same kind.
		Controller: config.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &listAllReconciler{Client: mgr.GetClient(), ns: ns, unsafe: fixed}
	err = ctrl.NewControllerManagedBy(mgr).
		Named(fmt.Sprintf("gccause-fixed-%t", fixed)).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == scenarioTrigger
		}))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return r, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}
