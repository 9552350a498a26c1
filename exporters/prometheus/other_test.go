package promexporter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
	dto "github.com/prometheus/client_model/go"
)

// simLedger is a synthetic ledger that evolves as a real one can: counters
// only grow, and classes move freely, so that sites keep entering and
// leaving the top K.
type simLedger struct {
	rng   *rand.Rand
	sites []finalizerwatch.SiteStats
	sumNs []int64
}

func newSimLedger(seed uint64, perKind int) *simLedger {
	l := &simLedger{rng: rand.New(rand.NewPCG(seed, seed))}
	bounds := finalizerwatch.DurationBounds()
	for _, kind := range finalizerwatch.Kinds {
		for i := range perKind {
			l.sites = append(l.sites, finalizerwatch.SiteStats{
				Kind:     kind,
				Site:     stackcapture.Frame{Function: fmt.Sprintf("example.com/app.f%d", i), File: "/src/app/f.go", Line: 10 + i},
				Duration: finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)},
			})
			l.sumNs = append(l.sumNs, 0)
		}
	}
	return l
}

// step grows some counters and reshuffles the classes.
func (l *simLedger) step() {
	for i := range l.sites {
		s := &l.sites[i]
		if l.rng.IntN(3) == 0 {
			continue
		}
		reg := l.rng.Uint64N(10)
		s.Registered += reg
		s.Outstanding += reg
		done := l.rng.Uint64N(s.Outstanding + 1)
		cleared := done / 4
		s.Outstanding -= done
		s.Cleared += cleared
		s.Executed += done - cleared
		for range done - cleared {
			s.Duration.Counts[l.rng.IntN(len(s.Duration.Counts))]++
			s.Duration.Count++
			l.sumNs[i] += l.rng.Int64N(int64(time.Millisecond))
		}
		s.Duration.Sum = time.Duration(l.sumNs[i]).Seconds()
		s.Suspect = l.rng.Uint64N(s.Outstanding + 1)
		s.Class = finalizerwatch.Class(l.rng.IntN(3))
		s.Growth = l.rng.Uint64N(4) * s.Suspect
	}
}

// snapshot returns the ledger as Sites would: fresh copies (the collector
// must not keep them) in no particular order.
func (l *simLedger) snapshot() []finalizerwatch.SiteStats {
	out := make([]finalizerwatch.SiteStats, len(l.sites))
	for i, s := range l.sites {
		s.Duration.Counts = append([]uint64(nil), s.Duration.Counts...)
		out[i] = s
	}
	l.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// counterValues extracts, per kind and site, every monotonic value the
// collector exports for the site: the counters of siteSeries (those sent
// for every site), the duration count, sum and cumulative buckets.
func counterValues(fams map[string]*dto.MetricFamily) map[[2]string][]float64 {
	out := map[[2]string][]float64{}
	add := func(m *dto.Metric, v ...float64) {
		l := labels(m)
		key := [2]string{l[labelKind], l[labelSite]}
		out[key] = append(out[key], v...)
	}
	// Families in a fixed order, so that the vectors line up.
	for _, r := range siteSeries {
		if !r.counter || r.sparse {
			continue
		}
		for _, m := range fams[r.name].GetMetric() {
			add(m, m.GetCounter().GetValue())
		}
	}
	for _, m := range fams["gcprobe_finalizer_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		add(m, float64(h.GetSampleCount()), h.GetSampleSum())
		for _, b := range h.GetBucket() {
			add(m, float64(b.GetCumulativeCount()))
		}
	}
	return out
}

// TestOtherIsMonotonic drives a collector with a ledger whose top K keeps
// changing, and checks at every Collect that the "other" counters never go
// down and that the increments of all exported series add up to the
// increments of the ledger's totals (so sum(rate(...)) is exact).
func TestOtherIsMonotonic(t *testing.T) {
	const perKind, k, steps = 20, 3, 200
	l := newSimLedger(5, perKind)
	l.step()
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(k))
	setSites(c, l.snapshot)

	totals := func() map[string][]float64 {
		out := map[string][]float64{}
		for _, s := range l.sites {
			// In counterValues's order.
			var v []float64
			for _, r := range siteSeries {
				if r.counter && !r.sparse {
					v = append(v, float64(r.value(&s)))
				}
			}
			v = append(v, float64(s.Duration.Count), s.Duration.Sum)
			var cum uint64
			for _, n := range s.Duration.Counts[:len(s.Duration.Counts)-1] {
				cum += n
				v = append(v, float64(cum))
			}
			if prev := out[s.Kind.String()]; prev != nil {
				for i := range v {
					v[i] += prev[i]
				}
			}
			out[s.Kind.String()] = v
		}
		return out
	}

	prev := counterValues(gather(t, c))
	prevTotals := totals()
	// At the first Collect, the series add up to the totals exactly.
	for kind, tot := range prevTotals {
		sum := make([]float64, len(tot))
		for key, v := range prev {
			if key[0] == kind {
				for i := range v {
					sum[i] += v[i]
				}
			}
		}
		for i := range tot {
			if math.Abs(sum[i]-tot[i]) > 1e-6 {
				t.Fatalf("first Collect, %s value %d: series sum to %v, total is %v", kind, i, sum[i], tot[i])
			}
		}
	}

	changes := 0
	for step := range steps {
		l.step()
		cur := counterValues(gather(t, c))
		curTotals := totals()
		for kind := range curTotals {
			n, other := 0, [2]string{kind, otherSite}
			// Δother + Σ over the sites in the top K at both Collects of
			// their Δ must equal Δtotal.
			delta := make([]float64, len(curTotals[kind]))
			for i := range delta {
				delta[i] = cur[other][i] - prev[other][i]
				if delta[i] < 0 {
					t.Fatalf("step %d, %s: other value %d went down from %v to %v", step, kind, i, prev[other][i], cur[other][i])
				}
			}
			for key, v := range cur {
				if key[0] != kind || key[1] == otherSite {
					continue
				}
				n++
				p, stayed := prev[key]
				if !stayed {
					changes++
					continue
				}
				for i := range v {
					delta[i] += v[i] - p[i]
				}
			}
			if n != k {
				t.Fatalf("step %d, %s: %d site series, want %d", step, kind, n, k)
			}
			for i := range delta {
				want := curTotals[kind][i] - prevTotals[kind][i]
				if math.Abs(delta[i]-want) > 1e-6 {
					t.Fatalf("step %d, %s value %d: series grew by %v, the total by %v", step, kind, i, delta[i], want)
				}
			}
		}
		prev, prevTotals = cur, curTotals
	}
	if changes < steps/4 {
		t.Fatalf("only %d changes of the top K in %d steps: the test does not exercise them", changes, steps)
	}
}

// TestOtherStartsExact grows a kind from fewer sites than K to more: while
// every site is in the top K there is no other series, and when other
// first appears it is the exact sum of the sites left out, so the series
// sum to the totals.
func TestOtherStartsExact(t *testing.T) {
	const k = 3
	l := newSimLedger(9, 6)
	visible := 0
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(k))
	setSites(c, func() []finalizerwatch.SiteStats {
		return slices.DeleteFunc(l.snapshot(), func(s finalizerwatch.SiteStats) bool { return s.Site.Line >= 10+visible })
	})
	for _, visible = range []int{1, 2, 3, 6} {
		l.step()
		fams := gather(t, c)
		for _, kind := range finalizerwatch.Kinds {
			var want, got float64
			var others int
			for _, s := range l.sites {
				if s.Kind == kind && s.Site.Line < 10+visible {
					want += float64(s.Registered)
				}
			}
			for _, m := range fams["gcprobe_finalizers_registered_total"].GetMetric() {
				if l := labels(m); l[labelKind] == kind.String() {
					got += m.GetCounter().GetValue()
					if l[labelSite] == otherSite {
						others++
					}
				}
			}
			if wantOthers := min(1, max(0, visible-k)); others != wantOthers {
				t.Errorf("%d sites, %v: %d other series, want %d", visible, kind, others, wantOthers)
			}
			if got != want {
				t.Errorf("%d sites, %v: series sum to %v registrations, want %v", visible, kind, got, want)
			}
		}
	}
}

// TestKindTotalsExactWhileSitesTradePlaces has two churn sites trade the
// top place every Collect under WithTopK(1), and adds up each series'
// increase as Prometheus's increase() does over a range (the samples a
// series has, gaps ignored, a drop read as a reset). Summed over the
// per-site series, that counts what a site added while outside the top K
// twice, once under "other" and once in its own series when it returns,
// as the package documentation says; the per-kind totals count it once.
func TestKindTotalsExactWhileSitesTradePlaces(t *testing.T) {
	const steps, per = 100, 150
	bounds := finalizerwatch.DurationBounds()
	sites := make([]finalizerwatch.SiteStats, 2)
	for i := range sites {
		sites[i] = finalizerwatch.SiteStats{
			Kind:     finalizerwatch.KindCleanup,
			Site:     stackcapture.Frame{Function: fmt.Sprintf("example.com/app.churn%d", i), File: "/src/app/f.go", Line: 10 + i},
			Duration: finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)},
		}
	}
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(1))
	setSites(c, func() []finalizerwatch.SiteStats { return slices.Clone(sites) })

	// increase accumulates, per series, what increase() over the whole
	// run reads from its samples.
	last := map[string]float64{}
	increase := map[string]float64{}
	sample := func(name string) {
		for _, m := range gather(t, c)[name].GetMetric() {
			l := labels(m)
			key := l[labelKind] + "/" + l[labelSite]
			v := m.GetCounter().GetValue()
			if p, ok := last[key]; ok {
				if v >= p {
					increase[key] += v - p
				} else {
					increase[key] += v
				}
			}
			last[key] = v
		}
	}
	step := func(i int) {
		for j := range sites {
			s := &sites[j]
			s.Registered += per
			// The leader, by outstanding count, alternates.
			s.Outstanding = 0
			if i%2 == j {
				s.Outstanding = 1
			}
			s.Executed = s.Registered - s.Outstanding
		}
	}
	step(0)
	sample("gcprobe_finalizers_registered_total")
	sample("gcprobe_finalizers_all_registered_total")
	for i := 1; i <= steps; i++ {
		step(i)
		sample("gcprobe_finalizers_registered_total")
		sample("gcprobe_finalizers_all_registered_total")
	}

	registered := float64(2 * per * steps) // since the first sample
	var summed float64
	for key, v := range increase {
		if key != "cleanup/" {
			summed += v
		}
	}
	if got := increase["cleanup/"]; got != registered {
		t.Errorf("gcprobe_finalizers_all_registered_total grew by %v, want %v, the registrations", got, registered)
	}
	// "other" counts every registration: each step, those of the site
	// that left the top K and of the one that returned, whose series
	// had no sample then. The returning site's own series, on each
	// return after its first, counts again the two steps since its
	// previous sample: nearly twice the registrations in all.
	if want := registered + float64(2*per*(steps-1)); summed != want {
		t.Errorf("the per-site series summed grew by %v, want %v (%v registrations): what a site added away from the top K should count twice, as documented", summed, want, registered)
	}
}
