package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/finalizerwatch"
)

const (
	// Finalizer is the Kubernetes finalizer the reconciler puts on the
	// ConfigMaps it manages and removes once their cleanup is done.
	Finalizer = "example.gcprobe.dev/cleanup"
	// DemoLabel selects the ConfigMaps the reconciler manages: those
	// where it is "true".
	DemoLabel = "gcprobe-demo"
	// FailDeletionAnnotation, set to "true" on a managed ConfigMap, makes
	// the reconciler fail its cleanup on purpose: the finalizer stays and
	// the object stays Terminating.
	FailDeletionAnnotation = "gcprobe.dev/fail-deletion"
)

// ConfigMapGVK is the kind the reconciler manages.
var ConfigMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")

// ConfigMapReconciler adds Finalizer to managed ConfigMaps and removes it
// when they are deleted. It reads and patches metadata only
// (metav1.PartialObjectMetadata): set it up with builder.OnlyMetadata, so
// that it shares the metadata informer of k8sfinalizers.
type ConfigMapReconciler struct {
	Client client.Client
}

// Reconcile brings one ConfigMap's finalizer in line with its state.
func (r *ConfigMapReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(ConfigMapGVK)
	if err := r.Client.Get(ctx, req.NamespacedName, cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	remember(cm)
	if cm.Labels[DemoLabel] != "true" {
		return reconcile.Result{}, nil
	}
	if cm.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(cm, Finalizer) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, r.patchFinalizer(ctx, cm, controllerutil.AddFinalizer)
	}
	if !controllerutil.ContainsFinalizer(cm, Finalizer) {
		return reconcile.Result{}, nil
	}
	// Planted bug 2: this object's cleanup always fails, so its finalizer
	// stays and it stays Terminating (gcprobe_k8s_terminating_objects).
	if cm.Annotations[FailDeletionAnnotation] == "true" {
		return reconcile.Result{}, fmt.Errorf("cleanup of ConfigMap %s refused on purpose (annotation %s)", req.NamespacedName, FailDeletionAnnotation)
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.patchFinalizer(ctx, cm, controllerutil.RemoveFinalizer))
}

// patchFinalizer applies change (add or remove Finalizer) with a merge
// patch of the metadata, guarded by the resourceVersion so that a
// concurrent change makes it fail and retry rather than overwrite.
func (r *ConfigMapReconciler) patchFinalizer(ctx context.Context, cm *metav1.PartialObjectMetadata, change func(client.Object, string) bool) error {
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(cm, Finalizer)
	return r.Client.Patch(ctx, cm, patch)
}

// auditRecord notes one reconcile. Its finalizer would flush it somewhere;
// it never runs, because the records are never let go.
type auditRecord struct {
	key  types.NamespacedName
	rv   string
	at   time.Time
	note [128]byte
}

// audit is planted bug 1: a package-level cache of audit records keyed by
// object, appended to on every reconcile and never pruned. Every record has
// a finalizer registered through finalizerwatch, so gcprobe counts them at
// the registering line: outstanding, surviving GC cycle after cycle.
var audit struct {
	mu      sync.Mutex
	records map[types.NamespacedName][]*auditRecord
}

// remember records a reconcile of cm in the audit cache.
func remember(cm *metav1.PartialObjectMetadata) {
	rec := &auditRecord{key: client.ObjectKeyFromObject(cm), rv: cm.ResourceVersion, at: time.Now()}
	finalizerwatch.SetFinalizer(rec, (*auditRecord).flush) // marker: operator-leak
	audit.mu.Lock()
	defer audit.mu.Unlock()
	if audit.records == nil {
		audit.records = map[types.NamespacedName][]*auditRecord{}
	}
	audit.records[rec.key] = append(audit.records[rec.key], rec)
}

// flush is the records' finalizer.
func (r *auditRecord) flush() { _ = r.note }
