package promexporter

import (
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The per-site series are sent as metrics of this file's types rather than
// as client_golang's const metrics, which rebuild their label pairs on
// every call (six allocations for two labels) and sort their histogram
// buckets out of a map: a site's label pairs are built once, when it joins
// the top K, and all the series of a site come from one allocation per
// Collect (plus the label pairs with resource, for a site that sends
// them). Like a metric vector's children, successive metrics share their
// label pairs; nothing reads them but the registry's encoder.

// siteLabels returns the label pairs (kind, site), sorted by name as the
// registry wants them.
func siteLabels(d *descs, kind, site string) []*dto.LabelPair {
	return prometheus.MakeLabelPairs(d.duration, []string{kind, validLabel(site)})
}

// siteMetrics are the series of one site (or of "other") in one Collect:
// one per row of siteSeries, and the duration histogram. They are written
// after Collect returns, by the registry, so a new siteMetrics is made for
// each Collect; it is never reused.
type siteMetrics struct {
	d      *descs
	labels []*dto.LabelPair // kind, site
	// withRes are labels with the label resource, for the rows of
	// siteSeries that have it; nil if none of them is sent.
	withRes []*dto.LabelPair
	values  [numSiteSeries]float64
	// scalar[i] is siteSeries[i]'s series; one with a nil sm is not sent
	// (see siteSeriesDef.sparse).
	scalar [numSiteSeries]scalarMetric
	hist   histMetric
}

// scalarMetric is a counter or a gauge: row i of siteSeries, of the site
// of sm. It holds no more than that, as a site sends one per row in each
// Collect: its descriptor, labels and value are sm's. The protobuf value
// Write hands out is allocated there: a scalar holds no dto.Counter and
// dto.Gauge of its own, most of which would go unused (they are the bulk
// of its size).
type scalarMetric struct {
	sm *siteMetrics
	i  int
}

func (m *scalarMetric) Desc() *prometheus.Desc { return m.sm.d.site[m.i] }

func (m *scalarMetric) Write(out *dto.Metric) error {
	r := &siteSeries[m.i]
	out.Label = m.sm.labels
	if r.byResource {
		out.Label = m.sm.withRes
	}
	v := &m.sm.values[m.i]
	if r.counter {
		out.Counter = &dto.Counter{Value: v}
	} else {
		out.Gauge = &dto.Gauge{Value: v}
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

// kindTotalMetrics are the per-kind totals of the counters (descs.kindTotal)
// of one kind in one Collect, made, like siteMetrics, in one allocation.
type kindTotalMetrics struct {
	d      *descs
	labels []*dto.LabelPair // kind
	values [finalizerwatch.NumCounters]float64
	// m[i] is the series of d.kindTotal[i]; one with a nil t is not sent.
	m [finalizerwatch.NumCounters]kindTotalMetric
}

// kindTotalMetric is the counter d.kindTotal[i] of its kindTotalMetrics.
type kindTotalMetric struct {
	t *kindTotalMetrics
	i int
}

func (m *kindTotalMetric) Desc() *prometheus.Desc { return m.t.d.kindTotal[m.i] }

func (m *kindTotalMetric) Write(out *dto.Metric) error {
	out.Label = m.t.labels
	out.Counter = &dto.Counter{Value: &m.t.values[m.i]}
	return nil
}

// send sends the totals.
func (t *kindTotalMetrics) send(ch chan<- prometheus.Metric) {
	for i := range t.m {
		if t.m[i].t != nil {
			ch <- &t.m[i]
		}
	}
}

var (
	_ prometheus.Metric = (*kindTotalMetric)(nil)
	_ prometheus.Metric = (*scalarMetric)(nil)
	_ prometheus.Metric = (*histMetric)(nil)
)

// newSiteMetrics fills the series of a site from the values of its
// siteSeries vals, its resource (SiteStats.Resource) and its ledger vector
// v (see other.go; the duration histogram's), with the duration buckets'
// bounds.
func newSiteMetrics(d *descs, labels []*dto.LabelPair, vals *siteValues, resource string, v []uint64, bounds []float64) *siteMetrics {
	sm := &siteMetrics{d: d, labels: labels}
	for i := range siteSeries {
		r := &siteSeries[i]
		if r.sparse && vals[i] == 0 && (!r.byResource || resource == "") {
			continue
		}
		if r.byResource && sm.withRes == nil {
			sm.withRes = resourceLabels(labels, resource)
		}
		sm.values[i] = float64(vals[i])
		sm.scalar[i] = scalarMetric{sm: sm, i: i}
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

// send sends the series.
func (sm *siteMetrics) send(ch chan<- prometheus.Metric) {
	for i := range sm.scalar {
		if sm.scalar[i].sm != nil {
			ch <- &sm.scalar[i]
		}
	}
	ch <- &sm.hist
}

// resourceLabels returns labels (kind, site) with the label resource
// added, sorted by name as the registry wants them: resource goes between.
func resourceLabels(labels []*dto.LabelPair, resource string) []*dto.LabelPair {
	withRes := make([]*dto.LabelPair, 0, len(labels)+1)
	name, value := "resource", validLabel(resource)
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
	return withRes
}
