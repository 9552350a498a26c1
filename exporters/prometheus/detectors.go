package promexporter

import (
	"iter"
	"slices"

	"github.com/gcprobe/probe/memstats"
	"github.com/prometheus/client_golang/prometheus"
)

// collectDetectors sends gcprobe_detector_firing for every detector the
// detectors sequence yields, each name once.
func (c *Collector) collectDetectors(ch chan<- prometheus.Metric) {
	c.seen = c.seen[:0]
	for name, firing := range c.cfg.detectors {
		// Detectors are few: a linear scan beats a map here.
		if slices.Contains(c.seen, name) {
			continue
		}
		c.seen = append(c.seen, name)
		v := 0.0
		if firing {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.d.detector, prometheus.GaugeValue, v, validLabel(name))
	}
}

// samplerDetectors are the detectors a memstats.Sampler runs.
var samplerDetectorNames = [...]string{
	memstats.DetectorQueueStalled,
	memstats.DetectorForcedGC,
	memstats.DetectorMCacheInuse,
	memstats.DetectorQueueLatency,
	memstats.DetectorFinalizerBlocked,
	// Why the GC works hard (memstats.CauseDetectors).
	memstats.DetectorAllocationDriven,
	memstats.DetectorLiveHeapGrowth,
	memstats.DetectorMemoryLimitPressure,
	memstats.DetectorStoppingLatency,
	memstats.DetectorAssistHeavy,
}

// samplerDetectors adapts s for WithDetectors: it yields each of the
// sampler's detectors (the memstats.Detector* names), firing when s.Active
// reports it, then any other detector s.Active reports (one memstats gained
// after this list was written). A detector turned off with
// memstats.WithoutDetector reads as not firing.
func samplerDetectors(s *memstats.Sampler) iter.Seq2[string, bool] {
	return func(yield func(string, bool) bool) {
		var buf [len(samplerDetectorNames)]memstats.Event
		active := s.Active(buf[:0])
		for _, name := range samplerDetectorNames {
			firing := slices.ContainsFunc(active, func(e memstats.Event) bool { return e.Detector == name && e.Firing })
			if !yield(name, firing) {
				return
			}
		}
		for _, e := range active {
			if !slices.Contains(samplerDetectorNames[:], e.Detector) && !yield(e.Detector, e.Firing) {
				return
			}
		}
	}
}
