package promexporter

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// docs/metrics.md lists every per-site series, and the package
// documentation's series table every one that is not a counter of the
// ledger, and the counters' by the rows of their pattern.
func TestDocListsSiteSeries(t *testing.T) {
	for _, f := range []struct {
		file, line string
		counters   bool // each counter's series has a row of its own
	}{
		{"doc.go", `(?m)^//\t%s `, false},                // the package documentation's table
		{"../../docs/metrics.md", "(?m)^\\| `%s`", true}, // the user's page
	} {
		doc, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"gcprobe_finalizers_<counter>_total", "gcprobe_finalizers_<counter>", "gcprobe_finalizers_all_<counter>_total"}
		if f.counters {
			names = nil
		}
		for i, r := range siteSeries {
			if f.counters || i >= finalizerwatch.NumCounters {
				names = append(names, r.name)
			}
		}
		for _, name := range names {
			if !regexp.MustCompile(fmt.Sprintf(f.line, regexp.QuoteMeta(name))).Match(doc) {
				t.Errorf("%s's series table lacks %s", f.file, name)
			}
		}
	}
}

// docs/metrics.md names every per-kind total, and every counter of the
// ledger has one.
func TestDocListsKindTotals(t *testing.T) {
	d := descriptors()
	var names []string
	for i, r := range siteSeries {
		if !r.counter || i >= finalizerwatch.NumCounters {
			continue
		}
		if d.kindTotal[i] == nil {
			t.Errorf("%s has no per-kind total", r.name)
		}
		names = append(names, kindTotalName(r.name))
	}
	if len(names) == 0 {
		t.Fatal("no per-kind totals")
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		// The table names the first in full, the others by suffix.
		if !strings.Contains(string(doc), strings.TrimPrefix(name, "gcprobe_finalizers")) {
			t.Errorf("docs/metrics.md does not name %s", name)
		}
	}
}

// The dropped series has the labels kind, resource and site, in that
// order, and is sent for a site registered through the standard library
// (0 or not), for any site that counts drops, and for "other" once it
// counts any; its resource is "" under "other".
func TestDroppedSeries(t *testing.T) {
	site := func(kind finalizerwatch.Kind, fn, resource string, registered, dropped uint64) finalizerwatch.SiteStats {
		bounds := finalizerwatch.DurationBounds()
		return finalizerwatch.SiteStats{
			Kind:     kind,
			Site:     stackcapture.Frame{Function: "example.com/app." + fn, File: "/src/app/f.go", Line: 10},
			Resource: resource,
			Counts: finalizerwatch.Counts{Registered: registered, Executed: dropped, Dropped: dropped,
				Outstanding: registered - dropped},
			Duration: finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)},
		}
	}
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(3))
	setSites(c, func() []finalizerwatch.SiteStats {
		return []finalizerwatch.SiteStats{
			site(finalizerwatch.KindFinalizer, "open", "os.File", 40, 0),  // through the standard library, none dropped yet
			site(finalizerwatch.KindFinalizer, "dial", "net.Conn", 30, 2), // dropped
			site(finalizerwatch.KindFinalizer, "mine", "", 20, 0),         // the site's own: no series
			site(finalizerwatch.KindFinalizer, "rest", "os.File", 10, 4),  // outside the top 3: under "other"
			site(finalizerwatch.KindCleanup, "mine", "", 5, 0),            // no series
		}
	})
	want := `
# HELP gcprobe_finalizers_dropped_total Finalizers or cleanups that ran for an object the standard library finalizes only when it was dropped without Close (files, network connections, os.Root, os.Process), registered through the site: each one a descriptor or handle left to the garbage collector. Runtime build mode only.
# TYPE gcprobe_finalizers_dropped_total counter
gcprobe_finalizers_dropped_total{kind="finalizer",resource="",site="other"} 4
gcprobe_finalizers_dropped_total{kind="finalizer",resource="net.Conn",site="example.com/app.dial /src/app/f.go:10"} 2
gcprobe_finalizers_dropped_total{kind="finalizer",resource="os.File",site="example.com/app.open /src/app/f.go:10"} 0
`
	for range 2 {
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gcprobe_finalizers_dropped_total"); err != nil {
			t.Fatal(err)
		}
	}
	// The label pairs, sorted by name as the registry wants them.
	for _, m := range gather(t, c)["gcprobe_finalizers_dropped_total"].GetMetric() {
		var names []string
		for _, l := range m.GetLabel() {
			names = append(names, l.GetName())
		}
		if got := strings.Join(names, ","); got != "kind,resource,site" {
			t.Errorf("label pairs %s, want kind,resource,site", got)
		}
	}
}

// A sparse counter's series (gcprobe_finalizers_cleared_outside_total) is
// sent only for the sites, and "other", where it is above 0.
func TestSparseSeries(t *testing.T) {
	site := func(fn string, registered, outside uint64) finalizerwatch.SiteStats {
		bounds := finalizerwatch.DurationBounds()
		return finalizerwatch.SiteStats{
			Kind:     finalizerwatch.KindFinalizer,
			Site:     stackcapture.Frame{Function: "example.com/app." + fn, File: "/src/app/f.go", Line: 10},
			Counts:   finalizerwatch.Counts{Registered: registered, Cleared: outside, ClearedOutside: outside, Outstanding: registered - outside},
			Duration: finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)},
		}
	}
	c := newCollector(t, WithWatcher(newWatcher(t)), WithTopK(2))
	sites := []finalizerwatch.SiteStats{
		site("a", 40, 0), // no series
		site("b", 30, 3),
		site("c", 20, 0), // outside the top 2, with nothing: no "other" yet
	}
	setSites(c, func() []finalizerwatch.SiteStats { return sites })
	want := `
# HELP gcprobe_finalizers_cleared_outside_total Of the cleared, finalizers registered at the site that were found cleared or replaced outside the watcher (runtime.SetFinalizer called directly) when their object's address was registered again.
# TYPE gcprobe_finalizers_cleared_outside_total counter
gcprobe_finalizers_cleared_outside_total{kind="finalizer",site="example.com/app.b /src/app/f.go:10"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gcprobe_finalizers_cleared_outside_total"); err != nil {
		t.Fatal(err)
	}
	sites[2] = site("c", 20, 1) // now "other" counts one
	want += `gcprobe_finalizers_cleared_outside_total{kind="finalizer",site="other"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gcprobe_finalizers_cleared_outside_total"); err != nil {
		t.Fatal(err)
	}
}
