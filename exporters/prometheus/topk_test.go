package promexporter

import (
	"math/rand/v2"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gcprobe/probe/finalizerwatch"
)

// exportedSites returns the site labels of family name's per-site series
// of kind, "other" left out, sorted.
func exportedSites(fams map[string]*dto.MetricFamily, name string, kind finalizerwatch.Kind) []string {
	var got []string
	for _, m := range fams[name].GetMetric() {
		l := labels(m)
		if l[labelKind] == kind.String() && l[labelSite] != otherSite {
			got = append(got, l[labelSite])
		}
	}
	slices.Sort(got)
	return got
}

// topSites returns the site labels of top of kind, sorted.
func topSites(top []finalizerwatch.SiteStats, kind finalizerwatch.Kind) []string {
	var want []string
	for _, s := range top {
		if s.Kind == kind {
			want = append(want, s.Site.Label())
		}
	}
	slices.Sort(want)
	return want
}

// TestCollectorExportsWhatReadReturns: the collector's per-site series
// are the sites of a Read of its K, no more and no fewer.
func TestCollectorExportsWhatReadReturns(t *testing.T) {
	w := newWatcher(t)
	plantGeneratedSites(t, w) // the ledger and its ranking stand still
	var sn finalizerwatch.Snapshot
	for _, k := range []int{1, 7, 150} {
		fams := gather(t, newCollector(t, WithWatcher(w), WithTopK(k)))
		w.Read(&sn, finalizerwatch.ReadOptions{TopK: k})
		for _, kind := range finalizerwatch.Kinds {
			got := exportedSites(fams, "gcprobe_finalizers_registered_total", kind)
			if want := topSites(sn.Top, kind); !slices.Equal(got, want) {
				t.Errorf("K=%d, %v: the collector exports\n%q\nRead returns\n%q", k, kind, got, want)
			}
		}
	}
}

// TestCollectorDoesNotCutReadsTop: the cut to K is Read's alone. Given a
// snapshot whose top holds more sites than the collector's K, the
// collector exports every one of them, and a kind's series still add up
// to its totals; a second cut here would drop those sites from both.
func TestCollectorDoesNotCutReadsTop(t *testing.T) {
	const k = 2
	sites := synthSites(rand.New(rand.NewPCG(5, 6)), 60)
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(k))
	var sn finalizerwatch.Snapshot
	snapshotOf(&sn, sites, 3*k)
	c.read = func(dst *finalizerwatch.Snapshot) { *dst = sn }
	fams := gather(t, c)
	for _, kind := range finalizerwatch.Kinds {
		ks := &sn.Kinds[kind]
		if len(ks.Top) <= k {
			t.Fatalf("%v: the snapshot's top holds %d sites, want more than K=%d", kind, len(ks.Top), k)
		}
		got := exportedSites(fams, "gcprobe_finalizers_registered_total", kind)
		if want := topSites(ks.Top, kind); !slices.Equal(got, want) {
			t.Errorf("%v: the collector exports\n%q\nthe snapshot's top is\n%q", kind, got, want)
		}
		var registered, want uint64
		for _, m := range fams["gcprobe_finalizers_registered_total"].GetMetric() {
			if labels(m)[labelKind] == kind.String() {
				registered += uint64(m.GetCounter().GetValue())
			}
		}
		for _, s := range sites {
			if s.Kind == kind {
				want += s.Registered
			}
		}
		if registered != want {
			t.Errorf("%v: registered series sum to %d, the sites to %d", kind, registered, want)
		}
	}
}
