package promexporter

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// numKinds is the number of finalizerwatch.Kind values.
const numKinds = len(finalizerwatch.Kinds)

// Collector is a prometheus.Collector of a finalizerwatch.Watcher's ledger
// and, optionally, of a memstats.Sampler's runtime signals. Make one with
// New and register it; the package documentation lists what it exports.
type Collector struct {
	cfg    config
	d      *descs
	bounds []float64 // the duration histogram's bucket bounds, seconds

	// read fills a snapshot of the ledger to export: cfg.watcher.Read of
	// the top K, except in tests that feed synthetic ledgers in.
	read func(dst *finalizerwatch.Snapshot)
	sn   finalizerwatch.Snapshot // reused by every Collect, under mu

	// mu serializes Collect, which keeps state from one call to the next
	// (the "other" counters, the high-water mark of the unwatched counters)
	// and reuses its scratch buffers. The lock is heavy-handed, but Collect
	// runs once per scrape, and two scrapes at once would otherwise race to
	// update that state.
	mu        sync.Mutex
	other     [numKinds]otherState
	unwatched [numKinds]uint64
	// kindTotals are the per-kind totals last exported, by counter: a
	// total never goes below one already exported.
	kindTotals [numKinds][finalizerwatch.NumCounters]uint64
	members    []*member
	total      [numKinds][]uint64 // per kind, the counters summed over every site
	otherVec   []uint64           // the counters to export under "other"
	// otherLabels are the label pairs of the "other" series of each kind.
	otherLabels [numKinds][]*dto.LabelPair
	// kindLabels are the label pairs (kind) of each kind's totals.
	kindLabels [numKinds][]*dto.LabelPair
	seen       []string // detector names exported by this Collect
	msn        memstats.Snapshot
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector configured by opts: by default it exports the
// ledger of finalizerwatch.Default with its DefaultTopK top sites, and
// no runtime-level series. A bad option is an error naming it.
func New(opts ...Option) (*Collector, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	c := &Collector{
		cfg:    cfg,
		d:      descriptors(),
		bounds: finalizerwatch.DurationBounds(),
	}
	c.read = func(dst *finalizerwatch.Snapshot) {
		cfg.watcher.Read(dst, finalizerwatch.ReadOptions{TopK: cfg.topK})
	}
	n := vecLen(c.bounds)
	for k, kind := range finalizerwatch.Kinds {
		c.other[k] = newOtherState(n)
		c.otherLabels[k] = siteLabels(c.d, kind.String(), otherSite)
		c.kindLabels[k] = prometheus.MakeLabelPairs(c.d.queued, []string{kind.String()})
	}
	for k := range c.total {
		c.total[k] = make([]uint64, n)
	}
	c.otherVec = make([]uint64, n)
	return c, nil
}

// Describe sends the descriptor of every series the collector can export,
// whichever options it was made with: registering two Collectors on one
// registry fails with prometheus.AlreadyRegisteredError either way.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
	describeGCCause(ch)
}

// Collect sends the current values. Its cost is that of one
// finalizerwatch.Watcher.Read of the top K sites: O(K) reads
// of the ledger and O(K) metrics, plus, on the first Collect of a GC cycle
// unless something (the probe) ranked the ledger since the cycle ended,
// the ranking's one pass over every entry (see Watcher.Rank).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()

	// The snapshot is taken before the ledger is read, so that the
	// runtime's counts in it are no newer than the watcher's: see
	// unwatchedNow.
	var sn *memstats.Snapshot
	if c.cfg.snapshot != nil {
		c.msn = c.cfg.snapshot()
		sn = &c.msn
	}
	c.read(&c.sn)
	var executed [numKinds]uint64
	var tracked [numKinds]int
	c.collectSites(ch, &c.sn, &executed, &tracked)
	c.collectSelf(ch, &tracked)
	c.collectRunning(ch)
	if sn != nil {
		c.collectRuntime(ch, sn, &executed)
	}
	if c.cfg.detectors != nil {
		c.collectDetectors(ch)
	}
	c.collectGCCause(ch, sn)
}

// collectSites sends the per-site series of the snapshot, and sets
// executed to the watcher's executed count of each kind and tracked to
// its number of sites of each kind (the overflow entry left out).
func (c *Collector) collectSites(ch chan<- prometheus.Metric, sn *finalizerwatch.Snapshot, executed *[numKinds]uint64, tracked *[numKinds]int) {
	for k, kind := range finalizerwatch.Kinds {
		ks := &sn.Kinds[k]
		// The snapshot's top sites, as many as Read returned: Read cut
		// the ranking to K, and its Other sums every site outside them,
		// so cutting again here would drop sites from the totals.
		top := ks.Top
		// The totals, exactly as the sum of what is exported: "other" as
		// of the ranking, the top K live.
		total := c.total[k]
		fillVec(total, &ks.Other)
		executed[k] = ks.Other.Executed
		for i := range top {
			addSite(total, &top[i])
			executed[k] += top[i].Executed
		}
		tracked[k] = ks.Tracked
		c.sendKindTotals(ch, k, total)
		c.members = c.other[k].update(top, ks.Ranked, total, c.otherVec, c.members)
		kl := kind.String()
		var vals siteValues
		for j := range top {
			m := c.members[j]
			if m.labels == nil {
				m.labels = siteLabels(c.d, kl, m.label)
			}
			vals.setGauges(&top[j])
			c.sendSite(ch, m.labels, &vals, top[j].Resource, m.last)
		}
		// "other" exists once a kind has more sites than K; since ledger
		// entries are never removed, it never goes away again.
		if ks.Ranked > len(top) {
			vals.setOtherGauges(ks, top)
			c.sendSite(ch, c.otherLabels[k], &vals, ks.Other.Resource, c.otherVec)
		}
	}
}

// sendKindTotals sends the exact per-kind totals of the counters, from
// total, the ledger vector summed over every site of the kind. Its
// "other" part is as of the ranking and its top K part live, so a site
// that leaves the top K could, in principle, count lower under the next
// ranking than it was read live; the high-water mark keeps the series a
// counter.
func (c *Collector) sendKindTotals(ch chan<- prometheus.Metric, k int, total []uint64) {
	prev := &c.kindTotals[k]
	tm := &kindTotalMetrics{d: c.d, labels: c.kindLabels[k]}
	for i, d := range c.d.kindTotal {
		if d == nil {
			continue
		}
		prev[i] = max(prev[i], total[i])
		tm.values[i] = float64(prev[i])
		tm.m[i] = kindTotalMetric{t: tm, i: i}
	}
	tm.send(ch)
}

// sendSite sends the series of one site, or of "other", from its label
// pairs, the values of its gauges in vals, its resource and its ledger
// vector v (its counters).
func (c *Collector) sendSite(ch chan<- prometheus.Metric, labels []*dto.LabelPair, vals *siteValues, resource string, v []uint64) {
	vals.setCounters(v)
	newSiteMetrics(c.d, labels, vals, resource, v, c.bounds).send(ch)
}

// cumulative returns the cumulative bucket counts of per-bucket counts
// (the last one, above every bound, left out: it is the count's). The map
// is new each time: a const histogram keeps it and reads it when the
// registry writes the metric, after Collect has returned.
func cumulative(bounds []float64, counts []uint64) map[float64]uint64 {
	m := make(map[float64]uint64, len(bounds))
	var sum uint64
	for i, b := range bounds {
		if i < len(counts) {
			sum += counts[i]
		}
		m[b] = sum
	}
	return m
}

// collectSelf sends the series about the watcher's own tables.
func (c *Collector) collectSelf(ch chan<- prometheus.Metric, tracked *[numKinds]int) {
	d := c.d
	ov := c.sn.Overflow
	ch <- prometheus.MustNewConstMetric(d.sitesOverflow, prometheus.CounterValue, float64(ov.Sites))
	ch <- prometheus.MustNewConstMetric(d.stacksOverflow, prometheus.CounterValue, float64(ov.Stacks))
	for k, kind := range finalizerwatch.Kinds {
		ch <- prometheus.MustNewConstMetric(d.sitesTracked, prometheus.GaugeValue, float64(tracked[k]), kind.String())
	}
}

// validLabel makes s valid UTF-8, as label values must be; file names
// rarely are not.
func validLabel(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
