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
