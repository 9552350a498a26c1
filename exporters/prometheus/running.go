package promexporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe/finalizerwatch"
)

// collectRunning sends gcprobe_finalizer_running_seconds for each watched
// finalizer or cleanup running now: one series per kind and site, absent
// when none runs there. A blocked finalizer never completes, so it never
// reaches the duration histogram; this is where it shows, by its site.
//
// The snapshot's Running lists one callback per site, so the series are
// bounded by the watcher's site table; two sites whose labels coincide
// (sites cut to the label's length bound) are sent once, the longest
// running, which Running lists first.
func (c *Collector) collectRunning(ch chan<- prometheus.Metric) {
	running := c.sn.Running
	if len(running) == 0 {
		return
	}
	type key struct {
		kind finalizerwatch.Kind
		site string
	}
	sent := make(map[key]struct{}, len(running))
	for _, r := range running {
		k := key{r.Kind, r.Site.Label()}
		if _, dup := sent[k]; dup {
			continue
		}
		sent[k] = struct{}{}
		ch <- prometheus.MustNewConstMetric(c.d.running, prometheus.GaugeValue, r.For.Seconds(), r.Kind.String(), k.site)
	}
}
