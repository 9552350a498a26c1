package promexporter

import (
	"iter"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/memstats"
)

// The series that say why the GC works hard. The cause detectors
// themselves are gcprobe_detector_firing{detector="allocation_driven"}
// and the others memstats.CauseDetectors names. Everything here is derived
// (a share over the sampler's rate window, a site of the heap profile):
// the raw runtime/metrics behind it are what collectors.NewGoCollector
// exports.
type gcCauseDescs struct {
	cause                                             *prometheus.Desc
	cpuClass, stoppingFraction, goalSetBy, liveGrowth *prometheus.Desc
	siteAlloc, siteGrowth, siteInUse                  *prometheus.Desc
}

var gcCauseDescriptors = sync.OnceValue(func() *gcCauseDescs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &gcCauseDescs{
		cause: d("gcprobe_gc_cause",
			"1 for each cause of GC work named now (the Report's and the live page's GC causes), with the first line it points at (\"function file:line\", empty when it names none); absent when the GC has no cause.", "cause", labelSite),
		cpuClass: d("gcprobe_gc_cpu_class_fraction",
			"Share of all the CPU available to the process (GOMAXPROCS x wall time) the GC used over the sampler's rate window, by class: assist (mark work charged to allocating goroutines), dedicated, idle, pause.", "class"),
		stoppingFraction: d("gcprobe_gc_stopping_fraction",
			"Share of the GC's stop-the-world time over the sampler's rate window spent stopping the world (bringing every goroutine to a safe point) rather than stopped."),
		goalSetBy: d("gcprobe_gc_pace_set_by",
			"1 for what sets the heap goal now: gogc, heap_minimum (the runtime's 4 MiB floor) or memory_limit (GOMEMLIMIT holds it below GOGC's); 0 for the others.", "by"),
		liveGrowth: d("gcprobe_gc_live_growth_ratio",
			"How much the live heap grew over the sampler's rate window (the low points of its first and last quarters), as a fraction of where it began; negative when it shrank."),
		siteAlloc: d("gcprobe_alloc_site_bytes_per_second",
			"Bytes allocated per second at the site over the heap profiler's latest window (runtime.MemProfile, scaled up from its samples), for its top allocating sites.", labelSite),
		siteGrowth: d("gcprobe_alloc_site_growth_bytes",
			"How much the in-use bytes of a growing site (grown over consecutive heap profile windows) grew over those windows, for the top growing sites.", labelSite),
		siteInUse: d("gcprobe_alloc_site_inuse_bytes",
			"In-use bytes of the heap profile's top allocating and growing sites, as of the latest GC cycle (an estimate from the runtime's samples).", labelSite),
	}
})

func (d *gcCauseDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.cause, d.cpuClass, d.stoppingFraction, d.goalSetBy, d.liveGrowth, d.siteAlloc, d.siteGrowth, d.siteInUse}
}

// describeGCCause sends the GC cause series' descriptors.
func describeGCCause(ch chan<- *prometheus.Desc) {
	for _, d := range gcCauseDescriptors().all() {
		ch <- d
	}
}

// goalSetByValues are the values of gcprobe_gc_pace_set_by's label.
var goalSetByValues = [...]string{memstats.GoalByGOGC, memstats.GoalByHeapMinimum, memstats.GoalByMemoryLimit}

var cpuClasses = [...]string{"assist", "dedicated", "idle", "pause"}

// collectGCCause sends the GC's work from the sampler's snapshot (when the
// collector has one) and the heap profile's top sites (when it has a
// profile, WithHeapProfile): at most topK sites per list, so the series are
// bounded.
func (c *Collector) collectGCCause(ch chan<- prometheus.Metric, sn *memstats.Snapshot) {
	d := gcCauseDescriptors()
	if c.cfg.causes != nil {
		seen := make(map[string]bool)
		for cause, site := range c.cfg.causes {
			if seen[cause] || len(seen) >= maxCauses {
				continue
			}
			seen[cause] = true
			ch <- prometheus.MustNewConstMetric(d.cause, prometheus.GaugeValue, 1, cause, site)
		}
	}
	if sn != nil {
		w := &sn.Work
		for i, v := range [...]float64{w.AssistFraction, w.DedicatedFraction, w.IdleFraction, w.PauseFraction} {
			ch <- prometheus.MustNewConstMetric(d.cpuClass, prometheus.GaugeValue, v, cpuClasses[i])
		}
		stopping := 0.0
		if w.StopTheWorld > 0 {
			stopping = w.Stopping.Seconds() / w.StopTheWorld.Seconds()
		}
		ch <- prometheus.MustNewConstMetric(d.stoppingFraction, prometheus.GaugeValue, stopping)
		for _, by := range goalSetByValues {
			v := 0.0
			if w.GoalSetBy == by {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(d.goalSetBy, prometheus.GaugeValue, v, by)
		}
		ch <- prometheus.MustNewConstMetric(d.liveGrowth, prometheus.GaugeValue, w.LiveGrowth)
	}
	if c.cfg.heap == nil {
		return
	}
	h := c.cfg.heap()
	// A site may be both allocating and growing; its in-use series is
	// sent once.
	seen := make(map[string]bool, 2*c.cfg.topK)
	inUse := func(s *heapprofile.Site, label string) {
		if !seen[label] {
			seen[label] = true
			ch <- prometheus.MustNewConstMetric(d.siteInUse, prometheus.GaugeValue, float64(s.InUseBytes), label)
		}
	}
	for i := range h.Allocating[:min(len(h.Allocating), c.cfg.topK)] {
		s := &h.Allocating[i]
		l := s.Label()
		ch <- prometheus.MustNewConstMetric(d.siteAlloc, prometheus.GaugeValue, s.AllocBytesPerSecond, l)
		inUse(s, l)
	}
	for i := range h.Growing[:min(len(h.Growing), c.cfg.topK)] {
		s := &h.Growing[i]
		l := s.Label()
		ch <- prometheus.MustNewConstMetric(d.siteGrowth, prometheus.GaugeValue, float64(s.GrownBytes), l)
		inUse(s, l)
	}
}

// maxCauses bounds gcprobe_gc_cause's series: more causes than this at
// once would be a bug of the source's, not a picture.
const maxCauses = 32

// WithCauses exports gcprobe_gc_cause: on each Collect the collector ranges
// over causes, which yields each cause of GC work named now (a cause
// detector's name, or another stable snake_case name) with the first line
// it points at ("" for none). A cause yielded twice is exported once, and
// at most 32 are. The probe passes the causes its Report names. Without
// it, or with nil, the series is omitted.
func WithCauses(causes iter.Seq2[string, string]) Option {
	return func(c *config) error {
		c.causes = causes
		return nil
	}
}

// WithHeapProfile exports the heap profile's top allocating and growing
// sites (gcprobe_alloc_site_*), at most the top K of each, from fn, called
// once per Collect: pass a heapprofile.Profiler's Snapshot method. Without
// it, or with nil, those series are omitted.
func WithHeapProfile(fn func() heapprofile.Snapshot) Option {
	return func(c *config) error {
		c.heap = fn
		return nil
	}
}
