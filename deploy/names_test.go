package deploy

// exportedMetricNames returns the name of every series the probe exports, as
// a query names it: a histogram contributes its _bucket, _sum and _count
// series, never its bare name.
//
// The list is the contract from shared/DESIGN.md and the deploy brief,
// hard-coded while the Prometheus exporter is being written. It will be
// replaced by the names from Describe() of the real collector (with the
// histogram suffixes added for histogram descriptors), so that a renamed or
// dropped metric breaks the dashboard and rule tests here instead of
// production dashboards.
func exportedMetricNames() map[string]bool {
	gaugesAndCounters := []string{
		// Per registration site (labels kind, site).
		"gcprobe_finalizers_outstanding",
		"gcprobe_finalizers_registered_total",
		"gcprobe_finalizers_executed_total",
		"gcprobe_finalizers_cleared_total",
		"gcprobe_finalizers_suspect_objects",

		// The runtime's queues (label kind).
		"gcprobe_finalizer_queue_length",
		"gcprobe_finalizer_queue_latency_seconds",
		"gcprobe_finalizers_queued_total",
		"gcprobe_finalizers_runtime_executed_total",
		"gcprobe_finalizers_unwatched_total",

		// The collector.
		"gcprobe_gc_forced_cycles_total",
		"gcprobe_gc_cpu_fraction",

		// Built-in detectors (label detector).
		"gcprobe_detector_firing",

		// Kubernetes objects waiting on finalizers (labels group, version,
		// kind, finalizer).
		"gcprobe_k8s_terminating_objects",
		"gcprobe_k8s_terminating_oldest_seconds",
	}
	histograms := []string{
		"gcprobe_finalizer_duration_seconds", // labels kind, site
		"gcprobe_gc_pause_seconds",
	}

	names := make(map[string]bool, len(gaugesAndCounters)+3*len(histograms))
	for _, name := range gaugesAndCounters {
		names[name] = true
	}
	for _, name := range histograms {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[name+suffix] = true
		}
	}
	return names
}
