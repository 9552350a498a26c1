package promexporter

import (
	"slices"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
)

// plantGeneratedSites registers i%5+1 objects at each generated site i and
// keeps them all, then waits until they are all leak suspects and closes
// the watcher, so that its ledger and ranking stand still.
func plantGeneratedSites(t *testing.T, w *finalizerwatch.Watcher) {
	t.Helper()
	t.Cleanup(func() { kept = nil })
	for i, register := range generatedSites {
		for range i%5 + 1 {
			o := new(siteObj)
			register(w, o)
			kept = append(kept, o)
		}
	}
	testkit.AwaitGC(t, 30*time.Second, "the suspect cycles to pass", ledgertest.ClocksAdvanced(w, uint64(w.SuspectCycles())+1))
	w.Close()
}

// TestReadMatchesTop checks that the snapshot the collector reads ranks
// real sites as a read of every site does, at every K: its Top is the
// first K of both kinds, and each kind's Top those of them of the kind.
func TestReadMatchesTop(t *testing.T) {
	w := newWatcher(t)
	plantGeneratedSites(t, w)
	if n := len(ledgertest.Sites(w)); n != len(generatedSites) {
		t.Fatalf("%d sites in the ledger, want %d", n, len(generatedSites))
	}
	all := ledgertest.Top(w, 0)
	var sn finalizerwatch.Snapshot
	for _, k := range []int{1, 7, 150, 1000} {
		w.Read(&sn, finalizerwatch.ReadOptions{TopK: k})
		var want, got []string
		for _, s := range all[:min(k, len(all))] {
			want = append(want, s.Site.String())
		}
		for _, s := range sn.Top {
			got = append(got, s.Site.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("K=%d: Read ranks\n%q\nTop ranks\n%q", k, got, want)
		}
		for _, kind := range finalizerwatch.Kinds {
			var want []string
			for _, s := range all[:min(k, len(all))] {
				if s.Kind == kind {
					want = append(want, s.Site.String())
				}
			}
			var got []string
			for _, s := range sn.Kinds[kind].Top {
				got = append(got, s.Site.String())
			}
			if !slices.Equal(got, want) {
				t.Errorf("K=%d, %v: Read ranks\n%q\nTop ranks\n%q", k, kind, got, want)
			}
		}
	}
}

func TestTopKBoundRealSites(t *testing.T) {
	w := newWatcher(t)
	plantGeneratedSites(t, w)
	const k = 5
	c := newCollector(t, WithWatcher(w), WithTopK(k))
	fams := gather(t, c)
	for _, name := range []string{
		"gcprobe_finalizers_outstanding",
		"gcprobe_finalizers_registered_total",
		"gcprobe_finalizers_executed_total",
		"gcprobe_finalizers_cleared_total",
		"gcprobe_finalizers_suspect_objects",
		"gcprobe_finalizer_duration_seconds",
	} {
		sites := 0
		others := map[string]int{}
		for _, m := range fams[name].GetMetric() {
			l := labels(m)
			if l[labelSite] == otherSite {
				others[l[labelKind]]++
			} else {
				sites++
			}
		}
		// K sites of either kind, and one other per kind: both kinds
		// have more sites than K.
		if sites != k {
			t.Errorf("%s: %d site series, want %d", name, sites, k)
		}
		for _, kind := range finalizerwatch.Kinds {
			if others[kind.String()] != 1 {
				t.Errorf("%s{kind=%q}: %d other series, want 1", name, kind, others[kind.String()])
			}
		}
	}

	// At the first Collect every sum is exact: the series of a kind add
	// up to the watcher's totals.
	for _, kind := range finalizerwatch.Kinds {
		tot := ledgertest.Totals(w, kind)
		var registered, outstanding, suspect float64
		for _, m := range fams["gcprobe_finalizers_registered_total"].GetMetric() {
			if labels(m)[labelKind] == kind.String() {
				registered += m.GetCounter().GetValue()
			}
		}
		for _, m := range fams["gcprobe_finalizers_outstanding"].GetMetric() {
			if labels(m)[labelKind] == kind.String() {
				outstanding += m.GetGauge().GetValue()
			}
		}
		for _, m := range fams["gcprobe_finalizers_suspect_objects"].GetMetric() {
			if labels(m)[labelKind] == kind.String() {
				suspect += m.GetGauge().GetValue()
			}
		}
		if registered != float64(tot.Registered) || outstanding != float64(tot.Outstanding) || suspect != float64(tot.Suspect) {
			t.Errorf("%v: series sum to registered %v, outstanding %v, suspect %v; totals are %+v", kind, registered, outstanding, suspect, tot)
		}
		if got := series(t, fams, "gcprobe_sites_tracked", kind.String(), "").GetGauge().GetValue(); got != float64(len(generatedSites)/2) {
			t.Errorf("gcprobe_sites_tracked{kind=%q} = %v, want %d", kind, got, len(generatedSites)/2)
		}
	}
}

func TestSiteOverflow(t *testing.T) {
	w := newWatcher(t, finalizerwatch.WithMaxSites(10))
	plantGeneratedSites(t, w)
	c := newCollector(t, WithWatcher(w))
	fams := gather(t, c)
	ov := ledgertest.Overflow(w)
	if ov.Sites == 0 {
		t.Fatal("no registration overflowed a 10-site table")
	}
	if got := fams["gcprobe_sites_overflow_total"].GetMetric()[0].GetCounter().GetValue(); got != float64(ov.Sites) {
		t.Errorf("gcprobe_sites_overflow_total = %v, want %d", got, ov.Sites)
	}
	var tracked float64
	for _, m := range fams["gcprobe_sites_tracked"].GetMetric() {
		tracked += m.GetGauge().GetValue()
	}
	if tracked != 10 {
		t.Errorf("gcprobe_sites_tracked sums to %v, want 10 (the overflow entry left out)", tracked)
	}
}
