package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestReconcile drives the reconciler against controller-runtime's fake
// client: the finalizer is added to labelled ConfigMaps only, removed on
// deletion, and kept (with an error) for the one whose cleanup fails.
func TestReconcile(t *testing.T) {
	demo := map[string]string{DemoLabel: "true"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		delete      bool
		wantErr     string
		wantFinal   bool // the finalizer is there after the reconcile
		wantGone    bool // the object is gone after the reconcile
	}{
		{name: "labelled gets the finalizer", labels: demo, wantFinal: true},
		{name: "unlabelled is left alone", labels: nil, wantFinal: false},
		{name: "deleted: finalizer removed, object gone", labels: demo, delete: true, wantGone: true},
		{name: "deletion refused on purpose", labels: demo, delete: true,
			annotations: map[string]string{FailDeletionAnnotation: "true"}, wantErr: "refused on purpose", wantFinal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().Build()
			r := &ConfigMapReconciler{Client: c}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns", Name: "cm", Labels: tt.labels, Annotations: tt.annotations,
			}}
			if err := c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "cm"}}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatalf("first reconcile: %v", err)
			}
			if tt.delete {
				if err := c.Delete(ctx, cm); err != nil {
					t.Fatal(err)
				}
			}
			_, err := r.Reconcile(ctx, req)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("second reconcile: got error %v, want %q", err, tt.wantErr)
			}
			got := &corev1.ConfigMap{}
			err = c.Get(ctx, client.ObjectKeyFromObject(cm), got)
			if tt.wantGone {
				if !apierrors.IsNotFound(err) {
					t.Errorf("the object is still there: %v %v", err, got.Finalizers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if has := controllerutil.ContainsFinalizer(got, Finalizer); has != tt.wantFinal {
				t.Errorf("finalizer present: %v, want %v (finalizers %v)", has, tt.wantFinal, got.Finalizers)
			}
		})
	}
}

func TestReconcileMissingObject(t *testing.T) {
	r := &ConfigMapReconciler{Client: fake.NewClientBuilder().Build()}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}}); err != nil {
		t.Errorf("a missing object is not an error: %v", err)
	}
}
