package k8sfinalizers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gcprobe/probe/internal/testkit"
)

func TestCollect(t *testing.T) {
	w, src, clk := newTestWatcher(t, WithRemovalBuckets(10, 60))
	cms := src.informer(t, configMaps)
	start := clk.Now()
	cms.Add(obj(configMaps, "ns", "a", start, "x.example/stuck"))
	cms.Add(obj(configMaps, "ns", "b", start.Add(30*time.Second), "x.example/stuck", "x.example/quick"))
	clk.Step(45 * time.Second)
	// b's quick finalizer goes after 15 s.
	cms.Update(nil, obj(configMaps, "ns", "b", start.Add(30*time.Second), "x.example/stuck"))
	src.informer(t, widgets).Add(obj(widgets, "", "w", start, "x.example/stuck"))

	const want = `
# HELP gcprobe_k8s_finalizer_removal_seconds Time from an object's deletionTimestamp to the removal of this finalizer from it (or the object's deletion).
# TYPE gcprobe_k8s_finalizer_removal_seconds histogram
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1",le="10"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1",le="60"} 1
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1",le="+Inf"} 1
gcprobe_k8s_finalizer_removal_seconds_sum{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1"} 15
gcprobe_k8s_finalizer_removal_seconds_count{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1"} 1
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1",le="10"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1",le="60"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1",le="+Inf"} 0
gcprobe_k8s_finalizer_removal_seconds_sum{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1"} 0
gcprobe_k8s_finalizer_removal_seconds_count{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1",le="10"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1",le="60"} 0
gcprobe_k8s_finalizer_removal_seconds_bucket{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1",le="+Inf"} 0
gcprobe_k8s_finalizer_removal_seconds_sum{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1"} 0
gcprobe_k8s_finalizer_removal_seconds_count{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1"} 0
# HELP gcprobe_k8s_terminating_objects Objects with a deletionTimestamp that still carry this finalizer.
# TYPE gcprobe_k8s_terminating_objects gauge
gcprobe_k8s_terminating_objects{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1"} 0
gcprobe_k8s_terminating_objects{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1"} 2
gcprobe_k8s_terminating_objects{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1"} 1
# HELP gcprobe_k8s_terminating_oldest_seconds Time since the deletionTimestamp of the oldest object that still carries this finalizer; 0 when there is none.
# TYPE gcprobe_k8s_terminating_oldest_seconds gauge
gcprobe_k8s_terminating_oldest_seconds{finalizer="x.example/quick",group="",kind="ConfigMap",version="v1"} 0
gcprobe_k8s_terminating_oldest_seconds{finalizer="x.example/stuck",group="",kind="ConfigMap",version="v1"} 45
gcprobe_k8s_terminating_oldest_seconds{finalizer="x.example/stuck",group="example.gcprobe.dev",kind="Widget",version="v1alpha1"} 45
`
	if err := testutil.CollectAndCompare(w, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(w); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestCollectNothingWatched(t *testing.T) {
	w, _, _ := newTestWatcher(t)
	if n := testutil.CollectAndCount(w); n != 0 {
		t.Errorf("a watcher that saw no terminating object exports %d series, want 0", n)
	}
}

// TestSeriesBounded checks the cardinality bound: however many objects and
// finalizer names, at most maxNames+1 finalizer labels per kind.
func TestSeriesBounded(t *testing.T) {
	w, src, clk := newTestWatcher(t, WithMaxFinalizerNames(4))
	cms := src.informer(t, configMaps)
	for i := range 1000 {
		name := fmt.Sprintf("n%d", i)
		cms.Add(obj(configMaps, "ns", name, clk.Now(), "x.example/"+name))
	}
	// 3 series per label, 5 labels (4 names and other).
	if n := testutil.CollectAndCount(w); n != 15 {
		t.Errorf("got %d series, want 15", n)
	}
	if s, _ := stat(w, configMaps, OtherFinalizer); s.Terminating != 996 {
		t.Errorf("other: got %d terminating, want 996", s.Terminating)
	}
}

func TestStartRegistersAndUnregisters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	w, _, _ := newTestWatcher(t, WithRegisterer(reg))
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	testkit.Poll(t, 5*time.Second, "the collector registered", func() bool {
		return reg.Unregister(w) && reg.Register(w) == nil
	})

	// A second watcher on the same registerer gets a clear error.
	w2, _, _ := newTestWatcher(t, WithRegisterer(reg))
	if err := w2.Start(ctx); !errors.Is(err, ErrAlreadyRegistered) {
		t.Errorf("second watcher's Start: got %v, want ErrAlreadyRegistered", err)
	}
	// It is stopped for good, like a probe whose start failed, and its
	// collector was never registered, so it is not unregistered either.
	if err := w2.Start(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after a failed Start: got %v, want ErrStopped", err)
	}
	// And the first cannot start twice.
	if err := w.Start(ctx); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "k8sfinalizers: Watcher.Start") {
		t.Errorf("second Start: got %v, want ErrRunning naming k8sfinalizers: Watcher.Start", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
	if reg.Unregister(w) {
		t.Error("the collector is still registered after Start returned")
	}
	// A watcher runs once: the answer for a restart is the probe's.
	if err := w.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Start ended: got %v, want ErrStopped", err)
	}
}

func TestNeedLeaderElection(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []Option
		want bool
	}{
		{"default", nil, true},
		{"every replica", []Option{WithLeaderElection(false)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(append([]Option{WithGVKs(configMaps)}, tt.give...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.NeedLeaderElection(); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
