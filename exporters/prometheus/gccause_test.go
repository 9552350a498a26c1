package promexporter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

func TestGCCauseSeries(t *testing.T) {
	sn := memstats.Snapshot{Samples: 3, Work: memstats.Work{
		AssistFraction: 0.08, DedicatedFraction: 0.2, IdleFraction: 0.01, PauseFraction: 0.001,
		StopTheWorld: 4 * time.Millisecond, Stopping: 3 * time.Millisecond,
		GoalSetBy: memstats.GoalByMemoryLimit, LiveGrowth: 0.25,
	}}
	// Twelve allocating sites and two growing ones, one of them also
	// allocating: with a top K of 3, three of each.
	var h heapprofile.Snapshot
	site := func(i int) heapprofile.Site {
		return heapprofile.Site{Frame: stackcapture.Frame{Function: fmt.Sprintf("main.f%d", i), File: "/src/main.go", Line: i},
			AllocBytesPerSecond: float64(1000 - i), InUseBytes: int64(100 * i), GrownBytes: int64(10 * i)}
	}
	for i := range 12 {
		h.Allocating = append(h.Allocating, site(i))
	}
	h.Growing = []heapprofile.Site{site(1), site(20)}
	c := newCollector(t, WithTopK(3), WithSnapshotFunc(func() memstats.Snapshot { return sn }),
		WithHeapProfile(func() heapprofile.Snapshot { return h }))

	want := `
# HELP gcprobe_gc_cpu_class_fraction Share of all the CPU available to the process (GOMAXPROCS x wall time) the GC used over the sampler's rate window, by class: assist (mark work charged to allocating goroutines), dedicated, idle, pause.
# TYPE gcprobe_gc_cpu_class_fraction gauge
gcprobe_gc_cpu_class_fraction{class="assist"} 0.08
gcprobe_gc_cpu_class_fraction{class="dedicated"} 0.2
gcprobe_gc_cpu_class_fraction{class="idle"} 0.01
gcprobe_gc_cpu_class_fraction{class="pause"} 0.001
# HELP gcprobe_gc_stopping_fraction Share of the GC's stop-the-world time over the sampler's rate window spent stopping the world (bringing every goroutine to a safe point) rather than stopped.
# TYPE gcprobe_gc_stopping_fraction gauge
gcprobe_gc_stopping_fraction 0.75
# HELP gcprobe_gc_pace_set_by 1 for what sets the heap goal now: gogc, heap_minimum (the runtime's 4 MiB floor) or memory_limit (GOMEMLIMIT holds it below GOGC's); 0 for the others.
# TYPE gcprobe_gc_pace_set_by gauge
gcprobe_gc_pace_set_by{by="gogc"} 0
gcprobe_gc_pace_set_by{by="heap_minimum"} 0
gcprobe_gc_pace_set_by{by="memory_limit"} 1
# HELP gcprobe_alloc_site_bytes_per_second Bytes allocated per second at the site over the heap profiler's latest window (runtime.MemProfile, scaled up from its samples), for its top allocating sites.
# TYPE gcprobe_alloc_site_bytes_per_second gauge
gcprobe_alloc_site_bytes_per_second{site="main.f0 /src/main.go:0"} 1000
gcprobe_alloc_site_bytes_per_second{site="main.f1 /src/main.go:1"} 999
gcprobe_alloc_site_bytes_per_second{site="main.f2 /src/main.go:2"} 998
# HELP gcprobe_alloc_site_growth_bytes How much the in-use bytes of a growing site (grown over consecutive heap profile windows) grew over those windows, for the top growing sites.
# TYPE gcprobe_alloc_site_growth_bytes gauge
gcprobe_alloc_site_growth_bytes{site="main.f1 /src/main.go:1"} 10
gcprobe_alloc_site_growth_bytes{site="main.f20 /src/main.go:20"} 200
# HELP gcprobe_alloc_site_inuse_bytes In-use bytes of the heap profile's top allocating and growing sites, as of the latest GC cycle (an estimate from the runtime's samples).
# TYPE gcprobe_alloc_site_inuse_bytes gauge
gcprobe_alloc_site_inuse_bytes{site="main.f0 /src/main.go:0"} 0
gcprobe_alloc_site_inuse_bytes{site="main.f1 /src/main.go:1"} 100
gcprobe_alloc_site_inuse_bytes{site="main.f2 /src/main.go:2"} 200
gcprobe_alloc_site_inuse_bytes{site="main.f20 /src/main.go:20"} 2000
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gcprobe_gc_cpu_class_fraction", "gcprobe_gc_stopping_fraction", "gcprobe_gc_pace_set_by",
		"gcprobe_alloc_site_bytes_per_second", "gcprobe_alloc_site_growth_bytes", "gcprobe_alloc_site_inuse_bytes"); err != nil {
		t.Fatal(err)
	}
}

func TestGCCauseSeriesWithoutSources(t *testing.T) {
	c := newCollector(t)
	if n := testutil.CollectAndCount(c, "gcprobe_gc_cpu_class_fraction", "gcprobe_alloc_site_bytes_per_second"); n != 0 {
		t.Fatalf("%d GC cause series without a sampler or a heap profile", n)
	}
	// Described whatever the options, as every series is.
	ch := make(chan *prometheus.Desc, 128)
	c.Describe(ch)
	close(ch)
	var found bool
	for d := range ch {
		found = found || strings.Contains(d.String(), `"gcprobe_alloc_site_bytes_per_second"`)
	}
	if !found {
		t.Fatal("gcprobe_alloc_site_bytes_per_second is not described")
	}
}

func TestCauseDetectorsExported(t *testing.T) {
	for _, name := range memstats.CauseDetectors() {
		found := false
		for _, n := range samplerDetectorNames {
			found = found || n == name
		}
		if !found {
			t.Errorf("cause detector %s has no gcprobe_detector_firing series while quiet", name)
		}
	}
}

// gcprobe_gc_cause has one series per cause named now, with its first line;
// a cause yielded twice is exported once, and none means no series.
func TestCauseSeries(t *testing.T) {
	causes := [][2]string{{"live_heap_growth", "main.grow grow.go:12"}, {"forced_gc", ""}, {"live_heap_growth", "main.other o.go:1"}}
	c := newCollector(t, WithCauses(func(yield func(string, string) bool) {
		for _, k := range causes {
			if !yield(k[0], k[1]) {
				return
			}
		}
	}))
	fam := gather(t, c)["gcprobe_gc_cause"]
	if fam == nil {
		t.Fatal("no gcprobe_gc_cause")
	}
	got := map[string]string{}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		got[l["cause"]] = l["site"]
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("%v = %v, want 1", l, m.GetGauge().GetValue())
		}
	}
	if len(got) != 2 || got["live_heap_growth"] != "main.grow grow.go:12" || got["forced_gc"] != "" {
		t.Errorf("series %v", got)
	}
	causes = nil
	if fam := gather(t, c)["gcprobe_gc_cause"]; fam != nil {
		t.Errorf("with no cause: %v", fam)
	}
}
