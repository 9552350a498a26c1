package promexporter

import (
	"strings"
	"sync"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/prometheus/client_golang/prometheus"
)

// Label names.
const (
	labelKind     = "kind"
	labelSite     = "site"
	labelDetector = "detector"

	// otherSite is the site label of the sum of the sites outside the top K.
	otherSite = "other"
)

// descs are the collector's descriptors. They are immutable, so one set,
// built on first use, serves every Collector.
type descs struct {
	// Per site (labels kind, site): site[i] is siteSeries[i]'s, with the
	// label resource too where the row says so.
	site     [numSiteSeries]*prometheus.Desc
	duration *prometheus.Desc
	// Per kind (label kind): kindTotal[i] is the exact total over every
	// site of siteSeries[i], a counter of finalizerwatch.Counters; nil for
	// the gauges.
	kindTotal [finalizerwatch.NumCounters]*prometheus.Desc
	// The callback running now at a site (labels kind, site).
	running *prometheus.Desc
	// The runtime's queues (label kind).
	queueLength, queueLatency, queued, runtimeExecuted, unwatched *prometheus.Desc
	// The collector.
	pause, forced, cpuFraction *prometheus.Desc
	// Detectors (label detector).
	detector *prometheus.Desc
	// The watcher's own bounds.
	sitesOverflow, stacksOverflow, sitesTracked *prometheus.Desc
}

var descriptors = sync.OnceValue(func() *descs {
	site := []string{labelKind, labelSite}
	resource := []string{labelKind, "resource", labelSite}
	kind := []string{labelKind}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	ds := &descs{
		duration: d("gcprobe_finalizer_duration_seconds",
			"Run time of the finalizers or cleanups registered at the site.", site),

		running: d("gcprobe_finalizer_running_seconds",
			"How long the watched finalizer or cleanup running now at the site has been running; absent when none runs there.", site),

		queueLength: d("gcprobe_finalizer_queue_length",
			"Finalizers or cleanups queued by the runtime and not yet run.", kind),
		queueLatency: d("gcprobe_finalizer_queue_latency_seconds",
			"Delay a finalizer or cleanup queued now would wait: the queue's length over its recent drain rate, or the probe's sentinel when that is later.", kind),
		queued: d("gcprobe_finalizers_queued_total",
			"Finalizers or cleanups queued by the runtime since the program started, all of them, watched or not.", kind),
		runtimeExecuted: d("gcprobe_finalizers_runtime_executed_total",
			"Finalizers or cleanups run by the runtime since the program started, all of them, watched or not.", kind),
		unwatched: d("gcprobe_finalizers_unwatched_total",
			"Finalizers or cleanups the runtime ran that were not registered through the watcher, the probe's own excluded.", kind),

		pause: d("gcprobe_gc_pause_seconds",
			"Stop-the-world time of each GC cycle (all of the cycle's pauses together) since sampling started.", nil),
		forced: d("gcprobe_gc_forced_cycles_total",
			"GC cycles forced by runtime.GC or debug.FreeOSMemory.", nil),
		cpuFraction: d("gcprobe_gc_cpu_fraction",
			"Share of the process's CPU time used by the GC over the sampler's rate window.", nil),

		detector: d("gcprobe_detector_firing",
			"1 while the named detector is firing, 0 otherwise.", []string{labelDetector}),

		sitesOverflow: d("gcprobe_sites_overflow_total",
			"Registrations counted under the watcher's overflow site because its site table was full.", nil),
		stacksOverflow: d("gcprobe_stacks_overflow_total",
			"Registration stacks the watcher did not keep because its stack table was full.", nil),
		sitesTracked: d("gcprobe_sites_tracked",
			"Call sites the watcher keeps a ledger for, its overflow entry not included.", kind),
	}
	for i, r := range siteSeries {
		labels := site
		if r.byResource {
			labels = resource
		}
		ds.site[i] = d(r.name, r.help, labels)
		if r.counter && i < finalizerwatch.NumCounters {
			ds.kindTotal[i] = d(kindTotalName(r.name),
				"The kind's total of "+r.name+" over every site, the sites outside the top K included: exact whichever sites are in the top K, which a sum of the per-site series is not.", kind)
		}
	}
	return ds
})

// all lists every descriptor, for Describe.
func (d *descs) all() []*prometheus.Desc {
	all := append(d.site[:len(d.site):len(d.site)], d.duration)
	for _, t := range d.kindTotal {
		if t != nil {
			all = append(all, t)
		}
	}
	return append(all,
		d.running,
		d.queueLength, d.queueLatency, d.queued, d.runtimeExecuted, d.unwatched,
		d.pause, d.forced, d.cpuFraction,
		d.detector,
		d.sitesOverflow, d.stacksOverflow, d.sitesTracked,
	)
}

// kindTotalName is the name of the per-kind total of the per-site counter
// named name: gcprobe_finalizers_all_<counter>_total.
func kindTotalName(name string) string {
	return strings.Replace(name, "gcprobe_finalizers_", "gcprobe_finalizers_all_", 1)
}
