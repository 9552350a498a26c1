package deploy

import (
	"regexp"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/k8sfinalizers"
)

// k8sHistograms are the Kubernetes watcher's histograms. They have no
// series until an object's finalizer is removed, so a Gather cannot tell
// their type; TestExportedNamesComeFromTheCollectors checks that each is
// still described.
var k8sHistograms = []string{"gcprobe_k8s_finalizer_removal_seconds"}

var (
	namesOnce sync.Once
	names     map[string]bool
	described map[string]bool
	namesErr  error
)

// exportedMetricNames returns the name of every series the probe and the
// Kubernetes finalizer watcher export, as a query names it (a histogram
// contributes its _bucket, _sum and _count series, never its bare name),
// taken from the real collectors: a renamed or dropped metric breaks the
// dashboard and rule tests here rather than production dashboards.
func exportedMetricNames() map[string]bool {
	namesOnce.Do(func() { names, described, namesErr = collectNames() })
	if namesErr != nil {
		panic(namesErr)
	}
	return names
}

func collectNames() (names, described map[string]bool, err error) {
	w, err := finalizerwatch.New()
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	// One registration of each kind, so that the per-site series exist.
	type obj struct {
		p   *int
		buf [32]byte
	}
	o := &obj{}
	w.SetFinalizer(o, func(*obj) {})
	defer w.SetFinalizer(o, nil)
	finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0).Stop()

	p, err := probe.New(probe.WithWatcher(w), probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		return nil, nil, err
	}
	p.Sampler().Sample()
	k8s, err := k8sfinalizers.New(
		k8sfinalizers.WithRegisterer(prometheus.NewRegistry()),
		k8sfinalizers.WithGVKs(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}),
	)
	if err != nil {
		return nil, nil, err
	}

	described = map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		p.Collector().Describe(ch)
		k8s.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(p.Collector()); err != nil {
		return nil, nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, nil, err
	}
	histogram := map[string]bool{}
	for _, n := range k8sHistograms {
		histogram[n] = true
	}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			histogram[mf.GetName()] = true
		}
	}
	names = map[string]bool{}
	for n := range described {
		if histogram[n] {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[n+suffix] = true
			}
			continue
		}
		names[n] = true
	}
	return names, described, nil
}

func TestExportedNamesComeFromTheCollectors(t *testing.T) {
	got := exportedMetricNames()
	for _, n := range k8sHistograms {
		if !described[n] {
			t.Errorf("%s is no longer described by the Kubernetes watcher", n)
		}
	}
	for _, n := range []string{"gcprobe_finalizers_suspect_objects", "gcprobe_gc_pause_seconds_bucket", "gcprobe_k8s_terminating_objects"} {
		if !got[n] {
			t.Errorf("%s missing from the exported names %v", n, got)
		}
	}
}
