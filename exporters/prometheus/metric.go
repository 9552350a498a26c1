package promexporter

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The per-site series are sent as metrics of this file's types rather than
// as client_golang's const metrics, which rebuild their label pairs on
// every call (six allocations for two labels) and sort their histogram
// buckets out of a map: a site's label pairs are built once, when it joins
// the top K, and all six series of a site come from one allocation per
// Collect. Like a metric vector's children, successive metrics share their
// label pairs; nothing reads them but the registry's encoder.

// siteLabels returns the label pairs (kind, site), sorted by name as the
// registry wants them.
func siteLabels(d *descs, kind, site string) []*dto.LabelPair {
	return prometheus.MakeLabelPairs(d.outstanding, []string{kind, validLabel(site)})
}

// siteMetrics are the seven series of one site (or of "other") in one
// Collect. They are written after Collect returns, by the registry, so a
// new siteMetrics is made for each Collect; it is never reused.
type siteMetrics struct {
	scalar [6]scalarMetric
	hist   histMetric
	// dropped is sent for a site registered through the standard library
	// (runtime build mode), and for "other" once it counts any.
	dropped *scalarMetric
}

// scalarMetric is a counter or a gauge. The protobuf value Write hands
// out is allocated there: a scalar holds no dto.Counter and dto.Gauge of
// its own, most of which would go unused (they are the bulk of its size).
type scalarMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	gauge  bool
}

func (m *scalarMetric) Desc() *prometheus.Desc { return m.desc }

func (m *scalarMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.gauge {
		out.Gauge = &dto.Gauge{Value: &m.value}
	} else {
		out.Counter = &dto.Counter{Value: &m.value}
	}
	return nil
}

// histMetric is a histogram with fixed bounds, from per-bucket counts.
type histMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	count  uint64
	sum    float64
	// The bounds (shared, never modified) and cumulative counts, one per
	// bucket (+Inf left out: it is the count), the latter owned by this
	// metric.
	bounds []float64
	cum    []uint64
	h      dto.Histogram
}

func (m *histMetric) Desc() *prometheus.Desc { return m.desc }

func (m *histMetric) Write(out *dto.Metric) error {
	n := len(m.bounds)
	buckets := make([]dto.Bucket, n)
	ptrs := make([]*dto.Bucket, n)
	for i := range buckets {
		buckets[i].UpperBound = &m.bounds[i]
		buckets[i].CumulativeCount = &m.cum[i]
		ptrs[i] = &buckets[i]
	}
	m.h.SampleCount = &m.count
	m.h.SampleSum = &m.sum
	m.h.Bucket = ptrs
	out.Label = m.labels
	out.Histogram = &m.h
	return nil
}

var (
	_ prometheus.Metric = (*scalarMetric)(nil)
	_ prometheus.Metric = (*histMetric)(nil)
)

// newSiteMetrics fills the series of a site from its gauges and its ledger
// vector v (see other.go), with the duration buckets' bounds.
func newSiteMetrics(d *descs, labels []*dto.LabelPair, g gauges, v []uint64, bounds []float64) *siteMetrics {
	sm := &siteMetrics{}
	set := func(i int, desc *prometheus.Desc, value uint64, gauge bool) {
		sm.scalar[i] = scalarMetric{desc: desc, labels: labels, value: float64(value), gauge: gauge}
	}
	set(0, d.outstanding, g.outstanding, true)
	set(1, d.registered, v[vRegistered], false)
	set(2, d.executed, v[vExecuted], false)
	set(3, d.cleared, v[vCleared], false)
	set(4, d.suspect, g.suspect, true)
	set(5, d.growing, g.growing, true)
	if g.resource != "" || v[vDropped] > 0 {
		// labels are sorted by name (kind, site): resource goes between.
		withRes := make([]*dto.LabelPair, 0, len(labels)+1)
		name, value := "resource", validLabel(g.resource)
		added := false
		for _, l := range labels {
			if !added && l.GetName() > name {
				withRes = append(withRes, &dto.LabelPair{Name: &name, Value: &value})
				added = true
			}
			withRes = append(withRes, l)
		}
		if !added {
			withRes = append(withRes, &dto.LabelPair{Name: &name, Value: &value})
		}
		sm.dropped = &scalarMetric{desc: d.dropped, labels: withRes, value: float64(v[vDropped])}
	}

	n := len(bounds)
	cum := make([]uint64, n)
	var sum uint64
	counts := v[vDurBuckets:]
	for i := range n {
		if i < len(counts) {
			sum += counts[i]
		}
		cum[i] = sum
	}
	sm.hist = histMetric{
		desc:   d.duration,
		labels: labels,
		count:  v[vDurCount],
		sum:    float64(v[vDurSumNs]) / 1e9,
		bounds: bounds,
		cum:    cum,
	}
	return sm
}

// send sends the seven series.
func (sm *siteMetrics) send(ch chan<- prometheus.Metric) {
	for i := range sm.scalar {
		ch <- &sm.scalar[i]
	}
	ch <- &sm.hist
	if sm.dropped != nil {
		ch <- sm.dropped
	}
}
