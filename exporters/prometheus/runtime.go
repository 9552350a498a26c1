package promexporter

import (
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/prometheus/client_golang/prometheus"
)

// collectRuntime sends the series taken from the snapshot function.
// executed is the watcher's executed count of each kind, for the
// unwatched counters.
func (c *Collector) collectRuntime(ch chan<- prometheus.Metric, sn *memstats.Snapshot, executed *[numKinds]uint64) {
	d := c.d
	for k, kind := range finalizerwatch.Kinds {
		q := &sn.Finalizers
		if kind == finalizerwatch.KindCleanup {
			q = &sn.Cleanups
		}
		kl := kind.String()
		ch <- prometheus.MustNewConstMetric(d.queueLength, prometheus.GaugeValue, float64(q.Length), kl)
		ch <- prometheus.MustNewConstMetric(d.queueLatency, prometheus.GaugeValue, q.Latency.Seconds(), kl)
		ch <- prometheus.MustNewConstMetric(d.queued, prometheus.CounterValue, float64(q.Queued), kl)
		ch <- prometheus.MustNewConstMetric(d.runtimeExecuted, prometheus.CounterValue, float64(q.Executed), kl)
		c.unwatched[k] = max(c.unwatched[k], c.unwatchedNow(kind, q, executed[k]))
		ch <- prometheus.MustNewConstMetric(d.unwatched, prometheus.CounterValue, float64(c.unwatched[k]), kl)
	}
	h := &sn.PauseHistogram
	ch <- prometheus.MustNewConstHistogram(d.pause, h.Count, h.Sum, cumulative(h.Bounds, h.Counts))
	ch <- prometheus.MustNewConstMetric(d.forced, prometheus.CounterValue, float64(sn.ForcedCycles))
	ch <- prometheus.MustNewConstMetric(d.cpuFraction, prometheus.GaugeValue, sn.GCCPUFraction)
}

// unwatchedNow estimates how many callbacks of kind the runtime has run
// outside the watcher: the runtime's count, less the watcher's executed
// count, the runs of the process's GC-cycle sentinels (one chain per
// process, shared by every watcher and sampler: internal/gcclock) and
// what WithOwnCallbacksFunc reports, clamped at 0.
//
// The snapshot is taken before the ledger is read, so the runtime's count
// is no newer than the watcher's and the estimate runs low rather than
// high; the caller keeps its high-water mark, so the counter never goes
// down and a low estimate catches up on a later Collect. Callbacks of other
// Watchers in the process count as unwatched (they are not this
// watcher's). The stale last sentinel of a stopped chain is counted as
// the clock's, not as unwatched.
func (c *Collector) unwatchedNow(kind finalizerwatch.Kind, q *memstats.Queue, executed uint64) uint64 {
	watched := executed + c.cfg.sentinelRuns(kind)
	if c.cfg.own != nil {
		watched += c.cfg.own(kind)
	}
	if q.Executed <= watched {
		return 0
	}
	return q.Executed - watched
}
