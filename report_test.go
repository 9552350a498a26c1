package probe_test

import (
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// fmt prints a Report as its table; the table says when it is too early to
// judge, how many cycles are missing, and each top site's class.
func TestReportPrintsTableThroughFmt(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	plant(w)
	t.Cleanup(func() { leaked = nil })

	r := p.Report()
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintln(r); got != b.String()+"\n" {
		t.Fatalf("fmt.Sprintln(r) is not the table:\n%s\nwant:\n%s", got, b.String())
	}
	if r.MoreCycles <= 0 || r.MoreCycles > finalizerwatch.DefaultSuspectCycles+finalizerwatch.GrowthWindow {
		t.Fatalf("MoreCycles = %d just after the first registration", r.MoreCycles)
	}
	if want := fmt.Sprintf("too early to tell leaks from caches: %d more GC cycle(s) needed\n", r.MoreCycles); !strings.Contains(b.String(), want) {
		t.Fatalf("the table lacks %q:\n%s", want, b.String())
	}

	testkit.AwaitGC(t, 20*time.Second, "MoreCycles 0 and a top site with 5 suspects", func() bool {
		r = p.Report()
		return r.MoreCycles <= 0 && len(r.Top) > 0 && r.Top[0].Suspect == 5
	})
	table := fmt.Sprint(r)
	if strings.Contains(table, "too early") {
		t.Errorf("the table still says it is too early:\n%s", table)
	}
	// Five objects planted once and kept: long-lived but not growing.
	row := reportTable(t, table, "top sites")[fmt.Sprintf("github.com/gcprobe/probe_test.plant probe_test.go:%d", testkit.MarkerLine(t, "probe_test.go", "root-leak"))]
	want := map[string]string{"kind": "finalizer", "class": "stable", "growth": "-", "registered": "5", "executed": "0", "outstanding": "5", "suspect": "5"}
	if !containsAll(row, want) {
		t.Errorf("the table shows the planted site as %v, want %v:\n%s", row, want, table)
	}
}

// reportTable reads the table of a Report's text whose header starts with
// first: its rows by their first cell, each a map from the header's cells
// (without "watched: ") to the row's, read at the header's columns, so
// that a value under the wrong header, or a misaligned one, is seen.
func reportTable(t *testing.T, text, first string) map[string]map[string]string {
	t.Helper()
	lines := strings.Split(text, "\n")
	h := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, first+"  ") })
	if h < 0 {
		t.Fatalf("no table headed %q in\n%s", first, text)
	}
	// Cells are separated by two spaces or more (tabwriter's padding);
	// a cell itself has single spaces at most.
	cell := regexp.MustCompile(`\S+( \S+)*`)
	head := cell.FindAllStringIndex(lines[h], -1)
	rows := map[string]map[string]string{}
	for _, l := range lines[h+1:] {
		if len(l) < head[len(head)-1][0] || l[head[1][0]-1] != ' ' || l[head[1][0]-2] != ' ' {
			break // a line that is not a row of the table
		}
		row := map[string]string{}
		for i, c := range head {
			end := len(l)
			if i+1 < len(head) {
				end = head[i+1][0]
			}
			row[strings.TrimPrefix(lines[h][c[0]:c[1]], "watched: ")] = strings.TrimSpace(l[c[0]:end])
		}
		rows[row[first]] = row
		delete(row, first)
	}
	return rows
}

// containsAll reports whether row has every cell of want.
func containsAll(row, want map[string]string) bool {
	for k, v := range want {
		if row[k] != v {
			return false
		}
	}
	return true
}

// A finalizer found replaced or cleared outside finalizerwatch is counted
// apart, and the table says so: it is neither outstanding nor a clear made
// through the watcher.
func TestReportShowsFinalizersClearedOutside(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	type obj struct {
		p   *int
		buf [40]byte
	}
	o := &obj{}
	w.SetFinalizer(o, func(*obj) {})
	runtime.SetFinalizer(o, nil) // cleared where the watcher cannot see it
	w.SetFinalizer(o, func(*obj) {})
	defer w.SetFinalizer(o, nil)
	r := p.Report()
	if r.Finalizers.ClearedOutside != 1 || r.Finalizers.Cleared != 1 || r.Finalizers.Outstanding != 1 {
		t.Fatalf("totals %+v: want 1 cleared outside, 1 outstanding", r.Finalizers)
	}
	if want := "finalizers found cleared or replaced outside finalizerwatch (runtime.SetFinalizer called directly): 1\n"; !strings.Contains(r.String(), want) {
		t.Fatalf("the table lacks %q:\n%s", want, r)
	}
}

// The Report's tables: each kind's watched totals in the queue table, and
// each top site's counters, with their headers, as WriteTo lays them out.
func TestReportTables(t *testing.T) {
	site := func(fn string, line int, kind finalizerwatch.Kind, c finalizerwatch.Counts, suspect uint64) finalizerwatch.SiteStats {
		return finalizerwatch.SiteStats{Kind: kind, Site: stackcapture.Frame{Function: "example.com/app." + fn, File: "/src/app/f.go", Line: line},
			Counts: c, Suspect: suspect}
	}
	leak := site("leak", 10, finalizerwatch.KindFinalizer, finalizerwatch.Counts{Registered: 1200, Executed: 3, Cleared: 1, Outstanding: 1196}, 1100)
	leak.Class, leak.Growth = finalizerwatch.ClassGrowing, 250
	file := site("open", 20, finalizerwatch.KindCleanup, finalizerwatch.Counts{Registered: 40, Executed: 12, Dropped: 7, Outstanding: 28}, 5)
	file.Class, file.Resource = finalizerwatch.ClassStable, "os.File"
	r := probe.Report{
		Time:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Finalizers: finalizerwatch.Totals{Kind: finalizerwatch.KindFinalizer, Sites: 3, Counts: finalizerwatch.Counts{Registered: 1500, Executed: 290, Cleared: 10, ClearedOutside: 2, Outstanding: 1200}, Suspect: 1101},
		Cleanups:   finalizerwatch.Totals{Kind: finalizerwatch.KindCleanup, Sites: 1, Counts: finalizerwatch.Counts{Registered: 40, Executed: 12, Dropped: 7, Outstanding: 28}, Suspect: 5},
		Top:        []finalizerwatch.SiteStats{leak, file},
	}
	got := r.String()
	// The columns read at their headers: the summary counters of
	// finalizerwatch.Counters (today's named), then suspect.
	tables := []struct {
		first string
		want  map[string]map[string]string
	}{
		{"queue", map[string]map[string]string{
			"finalizers": {"length": "0", "growth/s": "+0.0", "latency": "0s", "registered": "1500", "executed": "290", "outstanding": "1200", "suspect": "1101"},
			"cleanups":   {"length": "0", "growth/s": "+0.0", "latency": "0s", "registered": "40", "executed": "12", "outstanding": "28", "suspect": "5"},
		}},
		{"top sites", map[string]map[string]string{
			"example.com/app.leak f.go:10":           {"kind": "finalizer", "class": "growing", "growth": "+250", "registered": "1200", "executed": "3", "outstanding": "1196", "suspect": "1100"},
			"example.com/app.open f.go:20 (os.File)": {"kind": "cleanup", "class": "dropped", "growth": "-", "registered": "40", "executed": "12", "outstanding": "28", "suspect": "5"},
		}},
	}
	for _, tb := range tables {
		rows := reportTable(t, got, tb.first)
		if len(rows) != len(tb.want) {
			t.Errorf("table %q has rows %v, want %d", tb.first, rows, len(tb.want))
		}
		for first, want := range tb.want {
			if !containsAll(rows[first], want) {
				t.Errorf("table %q, row %q: %v, want %v", tb.first, first, rows[first], want)
			}
		}
	}
	var cols []string
	for _, c := range finalizerwatch.Counters() {
		if c.Summary {
			cols = append(cols, c.Name)
		}
	}
	cols = append(cols, "suspect")
	for _, want := range []string{
		"queue       length  growth/s  latency  watched: " + strings.Join(cols, "  "),
		"top sites                               kind       class    growth  " + strings.Join(cols, "  "),
		"finalizers found cleared or replaced outside finalizerwatch (runtime.SetFinalizer called directly): 2\n",
		"\nleak at example.com/app.open /src/app/f.go:20: 7 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, got)
		}
	}
}

// TestReportNamesWhatAGrowingSiteLeaks: a growing site whose resource says
// what grows (SiteStats.Leak: the runtime build mode's HTTP client
// connections) gets the sentence under the table, at its whole label.
func TestReportNamesWhatAGrowingSiteLeaks(t *testing.T) {
	get := finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer,
		Site:     stackcapture.Frame{Function: "example.com/app.poll", File: "/src/app/poll.go", Line: 31},
		Counts:   finalizerwatch.Counts{Registered: 90, Outstanding: 90},
		Resource: "net.Conn (HTTP client)", Class: finalizerwatch.ClassGrowing, Growth: 60,
		Leak: "HTTP response body not closed (each open body holds its connection)"}
	got := probe.Report{Top: []finalizerwatch.SiteStats{get}}.String()
	for _, want := range []string{
		"example.com/app.poll poll.go:31 (net.Conn (HTTP client))",
		"\nleak at example.com/app.poll /src/app/poll.go:31: HTTP response body not closed (each open body holds its connection)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, got)
		}
	}
}

// TestReportSaysDropped checks the Report's words for a dropped site: a
// leak, in its class column and in a sentence after the table that gives
// its whole label, as the page does.
func TestReportSaysDropped(t *testing.T) {
	r := probe.Report{
		RuntimeMode: true,
		Top: []finalizerwatch.SiteStats{{Kind: finalizerwatch.KindFinalizer, Resource: "os.File",
			Site: stackcapture.Frame{Function: "main.main", File: "/src/main.go", Line: 34}, Counts: finalizerwatch.Counts{Registered: 20, Executed: 20, Dropped: 20}}},
		Finalizers: finalizerwatch.Totals{Kind: finalizerwatch.KindFinalizer, Counts: finalizerwatch.Counts{Registered: 25, Executed: 25, Dropped: 23}},
	}
	s := r.String()
	for _, w := range []string{
		"runtime build mode: every registration in the binary is counted",
		"main.main main.go:34 (os.File)  finalizer  dropped ",
		"\nleak at main.main /src/main.go:34: 20 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())\n",
		"\nand 3 more dropped without Close at sites outside the top 1 (WithTopK shows more)\n",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("report lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "churn") {
		t.Errorf("a dropped site reads as churn:\n%s", s)
	}
}
