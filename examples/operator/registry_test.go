package main

import (
	"errors"
	"testing"

	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/prometheus/client_golang/prometheus"
	// The controller package registers the Go collector (with every
	// runtime/metrics series), the process collector and the controller
	// metrics on metrics.Registry when it is linked in, as in any manager.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestControllerRuntimeRegistry registers the Prometheus exporter on
// controller-runtime's global registry, which carries the Go and process
// collectors and the controller metrics, as this operator's metrics server
// serves it. It lives here, not beside the exporter, because it imports
// controller-runtime, which the root module must not require.
func TestControllerRuntimeRegistry(t *testing.T) {
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := promexporter.New(promexporter.WithWatcher(w))
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.Registry.Register(c); err != nil {
		t.Fatalf("registering on controller-runtime's metrics.Registry: %v", err)
	}
	defer metrics.Registry.Unregister(c)

	fams, err := metrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatalf("gathering controller-runtime's metrics.Registry: %v", err)
	}
	seen := map[string]bool{}
	var ours int
	for _, f := range fams {
		if seen[f.GetName()] {
			t.Errorf("family %s gathered twice", f.GetName())
		}
		seen[f.GetName()] = true
		if f.GetName() == "gcprobe_sites_tracked" {
			ours++
		}
	}
	if !seen["go_goroutines"] || !seen["go_gc_cycles_forced_gc_cycles_total"] || ours != 1 {
		t.Errorf("gathered families lack the Go collector's or ours: %v", seen)
	}

	// A second probe on the same registry: an error, not a panic.
	c2, err := promexporter.New(promexporter.WithWatcher(w))
	if err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := metrics.Registry.Register(c2); !errors.As(err, &are) {
		t.Errorf("second Register = %v, want an AlreadyRegisteredError", err)
	}
}
