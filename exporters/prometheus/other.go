package promexporter

import (
	"github.com/gcprobe/probe/finalizerwatch"
	dto "github.com/prometheus/client_model/go"
)

// A ledger vector holds the counters of a site (or a sum of sites) that
// must never go down once exported: the counter rows of siteSeries, each
// at its row's index (a gauge row's slot stays 0), and the duration
// histogram, in integers so that sums and differences are exact (the
// histogram's sum in nanoseconds). Its length is vecLen(bounds).
const (
	vDurCount   = numSiteSeries + iota
	vDurSumNs   // the histogram's sum, nanoseconds
	vDurBuckets // first of len(bounds)+1 per-bucket (not cumulative) counts
)

func vecLen(bounds []float64) int { return vDurBuckets + len(bounds) + 1 }

// fillVec sets v to s's counters.
func fillVec(v []uint64, s *finalizerwatch.SiteStats) {
	clear(v)
	addSite(v, s)
}

// addSite adds s's counters to v. It runs once per site and Collect, so it
// is written for speed: no intermediate vector, no bounds checks in the
// bucket loop.
func addSite(v []uint64, s *finalizerwatch.SiteStats) {
	c := v[:numSiteSeries]
	for i := range siteSeries {
		if r := &siteSeries[i]; r.counter {
			c[i] += r.value(s)
		}
	}
	v[vDurCount] += s.Duration.Count
	v[vDurSumNs] += sumNs(s.Duration.Sum)
	counts := s.Duration.Counts
	b := v[vDurBuckets:]
	if len(counts) > len(b) {
		counts = counts[:len(b)]
	}
	b = b[:len(counts)]
	for i, n := range counts {
		b[i] += n
	}
}

// sumNs converts a histogram sum, float seconds made from integer
// nanoseconds, back to nanoseconds. Rounding is monotonic (a site's sum
// never converts lower than before), and exact for any realistic total;
// adding 0.5 and truncating is math.Round for the non-negative values a
// sum takes, at a fraction of the cost.
func sumNs(seconds float64) uint64 {
	if !(seconds > 0) { // also NaN
		return 0
	}
	return uint64(seconds*1e9 + 0.5)
}

func addVec(dst, a []uint64) {
	for i := range dst {
		dst[i] += a[i]
	}
}

// subVec subtracts a from dst, saturating at 0. The invariants of
// otherState keep every difference it takes non-negative; saturating keeps
// a broken invariant from wrapping around to 2^64.
func subVec(dst, a []uint64) {
	for i := range dst {
		if dst[i] < a[i] {
			dst[i] = 0
			continue
		}
		dst[i] -= a[i]
	}
}

// siteID identifies a site across Collect calls: the fields of its Frame
// that Sites merges by.
type siteID struct {
	function, file string
	line           int
}

func idOf(s *finalizerwatch.SiteStats) siteID {
	return siteID{s.Site.Function, s.Site.File, s.Site.Line}
}

// member is a site in the top K of its kind.
type member struct {
	label  string           // the site label, built once
	labels []*dto.LabelPair // its label pairs, built once; see metric.go
	entry  []uint64         // its counters when it joined the top K (zero at the first Collect)
	last   []uint64         // its counters at the latest Collect
	gen    uint64           // the latest Collect that found it in the top K
}

// otherState keeps the counters under site="other" monotonic while sites
// move in and out of the top K of one kind.
//
// The plain sum of the sites outside the top K would drop whenever a site
// joins the top K (its count leaves the sum) and Prometheus would read the
// drop as a counter reset, so rate() would report the whole sum again as
// an increase. Instead "other" counts what sites added while outside the
// top K:
//
//	other = total − Σ_{m in top K} (last_m − entry_m) − gone
//
// where entry_m is m's count when it joined, last_m its count now, and
// gone accumulates last_m − entry_m of every site that has left. When a
// site joins, its term is 0, so other does not move; while it stays, its
// increments go to its own series only; when it leaves, its term moves to
// gone unchanged, and what it adds from then on goes to other. Between two
// Collects, other therefore grows by exactly the increments of the sites
// outside the top K (or just arrived in it), and the increments of all
// series from one Collect to the next add up to the increments of the
// total. That does not make sums over sites exact in Prometheus: a site
// that joins the top K shows its full count while other keeps what it
// counted before, and one that returns resumes its old series with what
// it added while away, which increase() over a range spanning its absence
// counts again (see the package documentation; the per-kind totals,
// gcprobe_finalizers_all_*_total, are exact).
//
// Until a kind first has more than K sites, every site is in the top K
// and other has never been exported: there is no history to keep, so the
// sites that join then (every one of them new) join with entry 0, and
// other starts as the exact sum of the sites outside the top K.
type otherState struct {
	members map[siteID]*member
	gone    []uint64
	gen     uint64
	free    []*member
	// exact is true while no site of the kind has been left out of the
	// top K: other has not been exported yet.
	exact bool
}

func newOtherState(n int) otherState {
	return otherState{members: make(map[siteID]*member), gone: make([]uint64, n), exact: true}
}

// update records the top K of this Collect and sets
// other to the counters to export under site="other", given total, the
// counters summed over every site of the kind, and count, the number of
// those sites. It returns the members in top's order, reusing out.
func (o *otherState) update(top []finalizerwatch.SiteStats, count int, total, other []uint64, out []*member) []*member {
	o.gen++
	out = out[:0]
	for i := range top {
		s := &top[i]
		id := idOf(s)
		m := o.members[id]
		if m == nil {
			m = o.alloc(len(total))
			m.label, m.labels = s.Site.Label(), nil
			fillVec(m.entry, s)
			if o.exact {
				clear(m.entry)
			}
			o.members[id] = m
		}
		fillVec(m.last, s)
		m.gen = o.gen
		out = append(out, m)
	}
	copy(other, total)
	for id, m := range o.members {
		if m.gen != o.gen { // left the top K
			// While other has not been exported, it can start anywhere:
			// it starts as the exact sum, the leaver's past included.
			if !o.exact {
				for i := range o.gone {
					o.gone[i] += m.last[i] - m.entry[i]
				}
			}
			delete(o.members, id)
			o.free = append(o.free, m)
			continue
		}
		subVec(other, m.last)
		addVec(other, m.entry)
	}
	subVec(other, o.gone)
	if count > len(top) {
		o.exact = false
	}
	return out
}

func (o *otherState) alloc(n int) *member {
	if k := len(o.free); k > 0 {
		m := o.free[k-1]
		o.free = o.free[:k-1]
		return m
	}
	return &member{entry: make([]uint64, n), last: make([]uint64, n)}
}
