package promexporter

import "github.com/gcprobe/probe/finalizerwatch"

// siteSeries are the per-site series, the duration histogram aside: the
// one list of them. Their descriptors (descs.go), their slots in the
// ledger vector (other.go), Describe and the series each Collect sends
// (metric.go) are all made from it.
//
// Its first rows are those of finalizerwatch.Counters, in their order:
// gcprobe_finalizers_<name>_total for a counter, gcprobe_finalizers_<name>
// for a gauge, with the counter's help, so that a per-site counter added
// to finalizerwatch.Counts is exported as it is added there (and listed in
// the series table of doc.go, which TestDocListsSiteSeries checks). The
// rows of siteFigures, the site's figures other than counts, follow.
//
// The order of the rows is not otherwise visible (a registry sorts what
// it gathers).
var siteSeries = func() (rows [numSiteSeries]siteSeriesDef) {
	for i, c := range finalizerwatch.Counters() {
		name := "gcprobe_finalizers_" + c.Name
		if !c.Gauge {
			name += "_total"
		}
		count := c.Value
		rows[i] = siteSeriesDef{
			name:       name,
			help:       c.Help,
			counter:    !c.Gauge,
			byResource: c.Resource,
			sparse:     c.Sparse,
			value:      func(s *finalizerwatch.SiteStats) uint64 { return count(&s.Counts) },
		}
	}
	copy(rows[finalizerwatch.NumCounters:], siteFigures[:])
	return rows
}()

// siteFigures are the rows of siteSeries that are not counters of
// finalizerwatch.Counts.
var siteFigures = [...]siteSeriesDef{
	{
		name:  "gcprobe_finalizers_suspect_objects",
		help:  "Outstanding registrations at the site that have survived at least the watcher's SuspectCycles GC cycles: leak suspects.",
		value: func(s *finalizerwatch.SiteStats) uint64 { return s.Suspect },
	},
	{
		name:  "gcprobe_finalizers_growing",
		help:  "1 while the site's leak suspects keep reaching new highs (the finalizerwatch growth model classes it growing: a leak, or a cache still filling), 0 otherwise; under site=\"other\", the number of such sites outside the top K.",
		value: growing,
		// Other's Class is the highest class of the sites it sums, not
		// a count of them.
		kindTotal: func(ks *finalizerwatch.KindSnapshot) uint64 { return uint64(ks.Growing) },
	},
}

// numSiteSeries is the number of rows of siteSeries.
const numSiteSeries = finalizerwatch.NumCounters + len(siteFigures)

// siteSeriesDef is a row of siteSeries: a per-site series (labels kind
// and site) whose value value reads from a site's SiteStats.
type siteSeriesDef struct {
	name, help string
	// counter marks a counter; the others are gauges. A counter has a
	// slot of the ledger vector, by its row's index, which keeps it from
	// ever going down under site="other" as sites move in and out of the
	// top K (see otherState). A gauge under site="other" is its value at
	// finalizerwatch.KindSnapshot.Other, the plain sum over the sites
	// outside the top K, unless kindTotal is set.
	counter bool
	// byResource adds the label resource (SiteStats.Resource; "" under
	// site="other") between kind and site.
	byResource bool
	// sparse sends the series only for a site (or "other") whose value is
	// above 0, or, with byResource, that has a resource (registered
	// through the standard library in the runtime build mode).
	sparse bool
	value  func(*finalizerwatch.SiteStats) uint64
	// kindTotal, for a gauge whose sum over sites is not its value at
	// KindSnapshot.Other, is its sum over every site of the kind; the
	// gauge under site="other" is then that less the top K's values.
	kindTotal func(*finalizerwatch.KindSnapshot) uint64
}

// growing is 1 for a site the growth model classes growing, else 0.
func growing(s *finalizerwatch.SiteStats) uint64 {
	if s.Class == finalizerwatch.ClassGrowing {
		return 1
	}
	return 0
}

// siteValues are the values of one site's (or "other"'s) series in one
// Collect, by row of siteSeries.
type siteValues [numSiteSeries]uint64

// setGauges sets the gauge rows of vals to s's values; the counter rows
// come from the ledger vector (setCounters).
func (vals *siteValues) setGauges(s *finalizerwatch.SiteStats) {
	for i := range siteSeries {
		if r := &siteSeries[i]; !r.counter {
			vals[i] = r.value(s)
		}
	}
}

// setCounters sets the counter rows of vals from the ledger vector v.
func (vals *siteValues) setCounters(v []uint64) {
	for i := range siteSeries {
		if siteSeries[i].counter {
			vals[i] = v[i]
		}
	}
}

// setOtherGauges sets the gauge rows of vals to those of site="other" of
// the kind ks, whose top K sites are top.
func (vals *siteValues) setOtherGauges(ks *finalizerwatch.KindSnapshot, top []finalizerwatch.SiteStats) {
	for i := range siteSeries {
		r := &siteSeries[i]
		switch {
		case r.counter:
		case r.kindTotal == nil:
			vals[i] = r.value(&ks.Other)
		default:
			n := r.kindTotal(ks)
			for j := range top {
				n -= min(n, r.value(&top[j]))
			}
			vals[i] = n
		}
	}
}
