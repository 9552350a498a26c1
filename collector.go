package probe

import (
	"github.com/prometheus/client_golang/prometheus"

	promexporter "github.com/gcprobe/probe/exporters/prometheus"
)

// collector is what the probe registers: the exporter's collector plus the
// probe's own health, so that one Register and one Unregister cover both.
type collector struct {
	*promexporter.Collector
	p      *Probe
	panics *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(p *Probe, c *promexporter.Collector) *collector {
	return &collector{
		Collector: c,
		p:         p,
		panics: prometheus.NewDesc("gcprobe_probe_panics_total",
			"Panics inside the probe's own goroutines, recovered; the probe kept running.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.Collector.Describe(ch)
	ch <- c.panics
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.Collector.Collect(ch)
	ch <- prometheus.MustNewConstMetric(c.panics, prometheus.CounterValue, float64(c.p.panics.Load()))
}
