package probe_test

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

// fmt prints a Report as its table; the table says when it is too early to
// judge, how many cycles are missing, and each top site's class.
func TestReportPrintsTableThroughFmt(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w))
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

	deadline := time.Now().Add(20 * time.Second)
	for r.MoreCycles > 0 || len(r.Top) == 0 || r.Top[0].Suspect != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: MoreCycles %d, top %+v", r.MoreCycles, r.Top)
		}
		runtime.GC()
		time.Sleep(2 * time.Millisecond) // polling: the clock advances on the finalizer goroutine
		r = p.Report()
	}
	table := fmt.Sprint(r)
	if strings.Contains(table, "too early") {
		t.Errorf("the table still says it is too early:\n%s", table)
	}
	// Five objects planted once and kept: long-lived but not growing.
	if !regexp.MustCompile(`(?m)^top sites\s+kind\s+class\s+growth\s+registered\s+executed\s+outstanding\s+suspect\s*$`).MatchString(table) ||
		!regexp.MustCompile(`(?m)^\S+probe_test\.plant probe_test\.go:\d+\s+finalizer\s+stable\s+-\s+5\s+0\s+5\s+5\s*$`).MatchString(table) {
		t.Errorf("the table does not show the planted site as stable with its counts:\n%s", table)
	}
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
	for _, want := range []string{
		"queue       length  growth/s  latency  watched: registered  outstanding  suspect  \n" +
			"finalizers  0       +0.0      0s       1500                 1200         1101     \n" +
			"cleanups    0       +0.0      0s       40                   28           5        \n",
		"finalizers found cleared or replaced outside finalizerwatch (runtime.SetFinalizer called directly): 2\n",
		"top sites                               kind       class    growth  registered  executed  outstanding  suspect  \n" +
			"example.com/app.leak f.go:10            finalizer  growing  +250    1200        3         1196         1100     \n" +
			"example.com/app.open f.go:20 (os.File)  cleanup    stable   -       40          12        28           5        \n" +
			"dropped without Close: 7 os.File opened at example.com/app.open f.go:20 were garbage-collected without Close (a descriptor leak at that line)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, got)
		}
	}
}
