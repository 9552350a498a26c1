// Package promexporter exports gcprobe's finalizer and cleanup ledger
// (finalizerwatch) and runtime signals (memstats) as a
// prometheus.Collector.
//
//	c, err := promexporter.New(
//		promexporter.WithWatcher(finalizerwatch.Default),
//		promexporter.WithSampler(sampler), // a started *memstats.Sampler
//	)
//	if err != nil {
//		return err
//	}
//	if err := prometheus.Register(c); err != nil {
//		return err // a second Collector: *prometheus.AlreadyRegisteredError
//	}
//
// The collector exports nothing that client_golang's default
// collectors.NewGoCollector() does: not the heap goal, GOGC, the memory
// limit, the per-P cache sizes or the pause quantiles. With
// controller-runtime, register on its metrics.Registry. That registry's Go
// collector exports every runtime/metrics series (MetricsAll), among them
// the runtime's finalizer and cleanup totals (go_gc_finalizers_*_total,
// go_gc_cleanups_*_total), forced cycles (go_gc_cycles_forced_gc_cycles_total)
// and per-P pause distributions (go_sched_pauses_total_gc_seconds), which
// gcprobe_finalizers_queued_total, gcprobe_finalizers_runtime_executed_total,
// gcprobe_gc_forced_cycles_total and gcprobe_gc_pause_seconds overlap
// there: the names differ, so nothing clashes, and gcprobe's alert rules
// use gcprobe's own names so that they work on every registry.
//
// # Series
//
// kind is "finalizer" or "cleanup"; site is the registration's call site as
// "function file:line" (stackcapture.Frame.String), or "other".
//
//	name                                       type       labels      meaning
//	gcprobe_finalizers_<counter>_total         counter    kind, site  one per counter of the ledger (finalizerwatch.Counters), named and
//	                                                                  described as it names and describes it: registered_total,
//	                                                                  executed_total, ...; docs/metrics.md lists them. A Sparse
//	                                                                  counter's is sent only where above 0; a Resource counter's
//	                                                                  (dropped) carries the label resource between kind and site
//	                                                                  (finalizerwatch.SiteStats.Resource, "" under site="other") and
//	                                                                  is sent for every site registered through the standard library
//	gcprobe_finalizers_<counter>               gauge      kind, site  likewise, for a Gauge counter: gcprobe_finalizers_outstanding
//	gcprobe_finalizers_all_<counter>_total     counter    kind        the kind's exact total of a counter over every site, sent always
//	                                                                  (gcprobe_finalizers_all_registered_total, ...)
//	gcprobe_finalizers_suspect_objects         gauge      kind, site  outstanding and survived >= the watcher's SuspectCycles GC cycles
//	gcprobe_finalizers_growing                 gauge      kind, site  1 while the growth model classes the site growing (a leak), else 0;
//	                                                                  under site="other", how many growing sites are outside the top K
//	gcprobe_finalizer_duration_seconds         histogram  kind, site  run time; buckets finalizerwatch.DurationBounds
//	gcprobe_finalizer_running_seconds          gauge      kind, site  how long the watched callback running now at the site has run; absent when none
//	gcprobe_finalizer_queue_length             gauge      kind        queued by the runtime, not yet run (Snapshot.Finalizers/Cleanups.Length)
//	gcprobe_finalizer_queue_latency_seconds    gauge      kind        delay a callback queued now would wait: length over the recent drain rate, or the sentinel (Queue.Latency)
//	gcprobe_finalizers_queued_total            counter    kind        queued by the runtime since the program started, watched or not
//	gcprobe_finalizers_runtime_executed_total  counter    kind        run by the runtime since the program started, watched or not
//	gcprobe_finalizers_unwatched_total         counter    kind        run by the runtime, not registered through the watcher, the probe's own excluded
//	gcprobe_gc_pause_seconds                   histogram  -           stop-the-world time per GC cycle since sampling started
//	gcprobe_gc_forced_cycles_total             counter    -           GC cycles forced by runtime.GC or debug.FreeOSMemory
//	gcprobe_gc_cpu_fraction                    gauge      -           GC share of the process's CPU time over the sampler's rate window
//	gcprobe_detector_firing                    gauge      detector    1 while the detector fires, 0 otherwise
//	gcprobe_gc_cause                           gauge      cause,site  1 for each cause of GC work named now, with its first line (WithCauses); absent when none
//	gcprobe_gc_cpu_class_fraction              gauge      class       GC share of all the CPU by class (assist, dedicated, idle, pause) over the rate window
//	gcprobe_gc_stopping_fraction               gauge      -           share of the GC's stop-the-world time spent stopping the world, over the rate window
//	gcprobe_gc_pace_set_by                     gauge      by          1 for what sets the heap goal (gogc, heap_minimum, memory_limit), 0 for the others
//	gcprobe_gc_live_growth_ratio               gauge      -           growth of the live heap over the sampler's rate window, as a fraction (memstats.Work.LiveGrowth)
//	gcprobe_alloc_site_bytes_per_second        gauge      site        allocation rate at the heap profile's top K allocating sites (WithHeapProfile)
//	gcprobe_alloc_site_growth_bytes            gauge      site        in-use growth of the top K growing sites over their growing windows (WithHeapProfile)
//	gcprobe_alloc_site_inuse_bytes             gauge      site        in-use bytes of those sites (WithHeapProfile)
//	gcprobe_sites_overflow_total               counter    -           registrations counted under the overflow site (site table full)
//	gcprobe_stacks_overflow_total              counter    -           registration stacks not kept (stack table full)
//	gcprobe_sites_tracked                      gauge      kind        sites with a ledger entry, the overflow entry not included
//
// The series of the ledger's counters (<counter> above) and the
// series to gcprobe_finalizer_duration_seconds come from the watcher's
// ledger and are always exported (a Sparse counter's where its line
// says), as are the last three. gcprobe_finalizer_running_seconds has one series per
// site with a callback running now, whatever the top K: finalizers run one
// at a time and cleanups on a few goroutines, so they are few, and a
// blocked one must be named even when its site ranks low. The queue, pause, forced-cycle and CPU series, and
// the unwatched counters, need WithSnapshotFunc; gcprobe_detector_firing
// needs WithDetectors; WithSampler sets both. Describe lists every series
// either way.
//
// # Bounded cardinality
//
// The per-site series exist for the top K sites (WithTopK, default
// DefaultTopK), of either kind, as finalizerwatch's Snapshot.Top ranks them
// (sites whose suspects keep growing first, by their growth, then stable
// long-lived sites by suspects, then churn), plus one site="other" series
// per kind that has sites outside them: at most K+2 series per per-site
// metric. K is shared by the kinds, as it is by every consumer of the
// snapshot (the Report, the leak-report spans, the live page): a growing
// site of either kind outranks every stable one, so a busy population of
// one kind cannot push a leak of the other out of sight.
//
// A leak therefore takes a per-site series from a stable cache of any size
// within a few GC cycles, and gcprobe_finalizers_growing tells the two
// apart: alert on it rather than on the size of
// gcprobe_finalizers_suspect_objects, which a healthy cache can have in
// thousands.
//
// The gauges under site="other" are the plain sums over the sites outside
// the top K. The counters and the histogram under site="other" count what
// sites added while outside the top K, so that they never go down when a
// site joins the top K and takes its count with it. When a kind first has
// more than K sites, other starts as the exact sum of the sites outside
// the top K; from then on it grows by exactly what those sites add. A
// site's own series, though, always shows its full count: when a site
// leaves the top K and later returns, its series resumes at a count that
// includes what it added while away, which other has already counted, and
// increase() or rate() over a range that spans its absence counts that
// twice. Two sites trading the K-th place every cycle, as sites near the
// line do in a busy program, make sum(rate(...)) over sites nearly twice
// the truth. Sums over sites are therefore not exact; for the totals of a
// kind use the gcprobe_finalizers_all_*_total counters, which are the
// ledger's totals (the sites outside the top K as of the latest ranking,
// at most one GC cycle old, the top K live) and exact whichever sites are
// in the top K. The duration histogram has no per-kind total:
// gcprobe_finalizers_all_executed_total counts its runs.
//
// gcprobe_finalizers_unwatched_total is the runtime's executed count less
// the watcher's executed count, the runs of the process's GC-cycle
// sentinels (one chain, shared by every watcher and sampler) and what
// WithOwnCallbacksFunc reports, clamped at 0 and never lower than a value
// already exported. Callbacks registered
// through another Watcher count as unwatched.
//
// # Cost
//
// Collect makes one finalizerwatch.Watcher.Read of the top K sites: O(K)
// reads of the ledger, from the ranking that the watcher makes once per GC
// cycle (off the scrape path when the probe runs Watcher.RankEachCycle;
// otherwise the first Collect of a cycle pays for it, one pass over every
// entry). It sends the per-site series with label pairs built once per
// top-K membership, so its own allocations do not grow with the ledger.
// The package benchmarks measure both (BenchmarkCollect10000Sites,
// BenchmarkCollect300Sites, BenchmarkGoCollectorGather).
//
// All exported functions and methods are safe for concurrent use;
// concurrent Collect calls are serialized.
package promexporter
