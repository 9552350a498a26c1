package reconciletrace_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/tracing/reconciletrace"
)

// Wrap a reconciler before handing it to the controller builder
// (ctrl.NewControllerManagedBy(mgr).For(...).Complete(r)). Here it is
// called directly, with a recording tracer provider.
func ExampleWrap() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	})
	// A nil sampler is allowed: pauses are then read from the runtime.
	r, err := reconciletrace.Wrap(inner, nil,
		reconciletrace.WithTracerProvider(tp),
		reconciletrace.WithControllerName("widget"))
	if err != nil {
		log.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "w1"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		log.Fatal(err)
	}
	s := rec.Ended()[0]
	fmt.Println(s.Name())
	for _, a := range s.Attributes() {
		switch a.Key {
		case "gcprobe.controller.name", "k8s.namespace.name", "gcprobe.reconcile.name":
			fmt.Println(a.Key, a.Value.Emit())
		}
	}
	// Output:
	// reconcile
	// gcprobe.controller.name widget
	// k8s.namespace.name default
	// gcprobe.reconcile.name w1
}
