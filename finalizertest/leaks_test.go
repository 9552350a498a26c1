package finalizertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/stackcapture"

	"github.com/gcprobe/probe/internal/testkit"
)

// thing is big enough never to be tiny-allocated.
type thing struct {
	next *thing
	buf  [48]byte
}

// holder is a cleanup argument that reaches the object it cleans up.
type holder struct{ t *thing }

// plantSelfLeaks registers finalizers and cleanups that keep their own
// objects reachable, the classic leak: they never run.
func plantSelfLeaks(w *finalizerwatch.Watcher, fins, cleanups int) {
	for range fins {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) { _ = o.buf }) // marker: self-finalizer
	}
	for range cleanups {
		o := &thing{}
		finalizerwatch.AddCleanupTo(w, o, func(*holder) {}, &holder{o}) // marker: self-cleanup
	}
}

// plantKept registers n finalizers on objects that the caller keeps.
func plantKept(w *finalizerwatch.Watcher, n int) []*thing {
	objs := make([]*thing, n)
	for i := range objs {
		objs[i] = &thing{}
		w.SetFinalizer(objs[i], func(*thing) {}) // marker: kept
	}
	return objs
}

// plantKeptCleanups registers n cleanups on objects that the caller keeps.
func plantKeptCleanups(w *finalizerwatch.Watcher, n int) []*thing {
	objs := make([]*thing, n)
	for i := range objs {
		objs[i] = &thing{}
		finalizerwatch.AddCleanupTo(w, objs[i], func(int) {}, i) // marker: kept-cleanup
	}
	return objs
}

// churn registers finalizers and cleanups on objects it drops, and clears
// or stops a few more: none of them leaks.
func churn(w *finalizerwatch.Watcher, n int) {
	for i := range n {
		w.SetFinalizer(&thing{}, func(*thing) {})                 // marker: churn-finalizer
		finalizerwatch.AddCleanupTo(w, &thing{}, func(int) {}, i) // marker: churn-cleanup
	}
	o := &thing{}
	w.SetFinalizer(o, func(*thing) {})
	w.SetFinalizer(o, nil)
	finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0).Stop()
	runtime.KeepAlive(o)
}

func TestVerifyNoneNamesPlantedLeaks(t *testing.T) {
	w := newWatcher(t)
	plantSelfLeaks(w, 10, 4)
	churn(w, 200)
	finLine := testkit.MarkerLine(t, "leaks_test.go", "self-finalizer")
	cleanLine := testkit.MarkerLine(t, "leaks_test.go", "self-cleanup")

	ft := &fakeT{}
	VerifyNone(ft, WithWatcher(w))
	if ft.helpers == 0 {
		t.Error("VerifyNone did not call t.Helper")
	}
	if len(ft.errors) != 1 {
		t.Fatalf("VerifyNone reported %d errors, want 1: %q", len(ft.errors), ft.errors)
	}
	msg := ft.errors[0]
	for _, want := range []string{
		"14 leaked registration(s) at 2 call site(s), still outstanding after 3 forced GC cycles",
		"finalizer github.com/gcprobe/probe/finalizertest.plantSelfLeaks ",
		fmt.Sprintf("leaks_test.go:%d\n\tregistered 10, outstanding 10, leaked 10\n", finLine),
		"cleanup github.com/gcprobe/probe/finalizertest.plantSelfLeaks ",
		fmt.Sprintf("leaks_test.go:%d\n\tregistered 4, outstanding 4, leaked 4\n", cleanLine),
		"\n\tsurvived: 10 for ",
		"\n\tstable: long-lived, not growing\n\tregistration stack:",
		"finalizertest.TestVerifyNoneNamesPlantedLeaks\n",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%s", want, msg)
		}
	}
	for _, healthy := range []string{"churn-finalizer", "churn-cleanup"} {
		if line := testkit.MarkerLine(t, "leaks_test.go", healthy); strings.Contains(msg, fmt.Sprintf("leaks_test.go:%d", line)) {
			t.Errorf("report names the healthy site %s:\n%s", healthy, msg)
		}
	}

	// The same through Find, structured.
	var le *LeakError
	if err := Find(WithWatcher(w)); !errors.As(err, &le) {
		t.Fatalf("Find returned %v, want a *LeakError", err)
	}
	if len(le.Leaks) != 2 || le.Cycles != DefaultCycles {
		t.Fatalf("LeakError has %d leaks, cycles %d", len(le.Leaks), le.Cycles)
	}
	for i, want := range []struct {
		kind   finalizerwatch.Kind
		line   int
		leaked uint64
	}{{finalizerwatch.KindFinalizer, finLine, 10}, {finalizerwatch.KindCleanup, cleanLine, 4}} {
		l := le.Leaks[i]
		if l.Kind != want.kind || l.Site.Line != want.line || l.Leaked != want.leaked || l.Baseline != 0 {
			t.Errorf("leak %d: %v %v leaked %d baseline %d, want %v line %d leaked %d", i, l.Kind, l.Site, l.Leaked, l.Baseline, want.kind, want.line, want.leaked)
		}
		var old uint64
		for _, n := range l.Survived[DefaultCycles:] {
			old += n
		}
		if old != want.leaked {
			t.Errorf("leak %d: survived %v, want all %d at least %d cycles old", i, l.Survived, want.leaked, DefaultCycles)
		}
	}
}

func TestVerifyNonePassesCleanCode(t *testing.T) {
	w := newWatcher(t)
	churn(w, 500)
	// Objects registered long ago and dropped just before the check: Find
	// must force cycles of its own rather than trust their age.
	old := plantKept(w, 5)
	oldCleanups := plantKeptCleanups(w, 5)
	fin0, clean0 := ledgertest.Cycles(w, finalizerwatch.KindFinalizer), ledgertest.Cycles(w, finalizerwatch.KindCleanup)
	testkit.AwaitGC(t, 20*time.Second, "the registrations to age", func() bool {
		return ledgertest.Cycles(w, finalizerwatch.KindFinalizer) >= fin0+5 && ledgertest.Cycles(w, finalizerwatch.KindCleanup) >= clean0+5
	})
	runtime.KeepAlive(old)
	runtime.KeepAlive(oldCleanups)

	ft := &fakeT{}
	VerifyNone(ft, WithWatcher(w))
	if len(ft.errors) != 0 {
		t.Fatalf("VerifyNone failed a clean test:\n%s", strings.Join(ft.errors, "\n"))
	}
	for _, s := range ledgertest.Sites(w) {
		if s.Outstanding != 0 {
			t.Errorf("%v still has %d outstanding after VerifyNone passed", s.Site, s.Outstanding)
		}
	}
}

func TestFindForcesNoGCWhenNothingIsOutstanding(t *testing.T) {
	fresh := newWatcher(t) // no registration at all
	used := newWatcher(t)
	objs := plantKept(used, 3)
	before := forcedGCs()
	for _, w := range []*finalizerwatch.Watcher{fresh, used} {
		opts := []Option{WithWatcher(w)}
		if w == used {
			opts = append(opts, IgnoreCurrentOf(used)) // the 3 are the baseline
		}
		if err := Find(opts...); err != nil {
			t.Fatal(err)
		}
	}
	if n := forcedGCs() - before; n != 0 {
		t.Errorf("Find forced %d GC cycles with nothing outstanding", n)
	}
	runtime.KeepAlive(objs)
}

func TestIgnoreCurrentReportsTheExcess(t *testing.T) {
	w := newWatcher(t)
	before := plantKept(w, 3)
	baseline := IgnoreCurrentOf(w)
	after := plantKept(w, 2)
	cleanups := plantKeptCleanups(w, 1)

	var le *LeakError
	if err := Find(WithWatcher(w), baseline); !errors.As(err, &le) {
		t.Fatalf("Find returned %v, want a *LeakError", err)
	}
	keptLine := testkit.MarkerLine(t, "leaks_test.go", "kept")
	cleanLine := testkit.MarkerLine(t, "leaks_test.go", "kept-cleanup")
	if len(le.Leaks) != 2 {
		t.Fatalf("%d leaks, want 2:\n%v", len(le.Leaks), le)
	}
	if l := le.Leaks[0]; l.Site.Line != keptLine || l.Outstanding != 5 || l.Baseline != 3 || l.Leaked != 2 {
		t.Errorf("kept site: line %d outstanding %d baseline %d leaked %d, want line %d, 5, 3, 2", l.Site.Line, l.Outstanding, l.Baseline, l.Leaked, keptLine)
	}
	if l := le.Leaks[1]; l.Site.Line != cleanLine || l.Leaked != 1 || l.Baseline != 0 {
		t.Errorf("cleanup site: line %d leaked %d baseline %d, want line %d, 1, 0", l.Site.Line, l.Leaked, l.Baseline, cleanLine)
	}
	if msg := le.Error(); !strings.Contains(msg, "leaked 2 (3 outstanding at the IgnoreCurrent snapshot)") {
		t.Errorf("report does not show the baseline:\n%s", msg)
	}

	// A baseline taken now covers everything.
	if err := Find(WithWatcher(w), IgnoreCurrentOf(w)); err != nil {
		t.Errorf("Find with a fresh baseline: %v", err)
	}
	runtime.KeepAlive(before)
	runtime.KeepAlive(after)
	runtime.KeepAlive(cleanups)
}

func TestIgnoreSiteAndFunction(t *testing.T) {
	w := newWatcher(t)
	kept := plantKept(w, 2)
	cleanups := plantKeptCleanups(w, 3)
	keptLine := testkit.MarkerLine(t, "leaks_test.go", "kept")
	cleanLine := testkit.MarkerLine(t, "leaks_test.go", "kept-cleanup")
	const pkg = "github.com/gcprobe/probe/finalizertest."

	tests := []struct {
		name string
		give []Option
		want []int // lines of the sites reported
	}{
		{name: "no ignores", want: []int{cleanLine, keptLine}},
		{name: "site by file:line", give: []Option{IgnoreSite(fmt.Sprintf("leaks_test.go:%d", keptLine))}, want: []int{cleanLine}},
		{name: "site by function", give: []Option{IgnoreSite("plantKeptCleanups ")}, want: []int{keptLine}},
		{name: "site matching nothing", give: []Option{IgnoreSite("nowhere.go")}, want: []int{cleanLine, keptLine}},
		{name: "site function", give: []Option{IgnoreFunction(pkg + "plantKept")}, want: []int{cleanLine}},
		{name: "function lower in the stack", give: []Option{IgnoreFunction(pkg + "TestIgnoreSiteAndFunction")}},
		{name: "function prefix is not a match", give: []Option{IgnoreFunction(pkg + "plantKeptClean")}, want: []int{cleanLine, keptLine}},
		{name: "both", give: []Option{IgnoreFunction(pkg + "plantKept"), IgnoreSite("leaks_test.go:" + fmt.Sprint(cleanLine))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Find(append(tt.give, WithWatcher(w))...)
			var got []int
			var le *LeakError
			if errors.As(err, &le) {
				for _, l := range le.Leaks {
					got = append(got, l.Site.Line)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("reported lines %v, want %v", got, tt.want)
			}
		})
	}
	runtime.KeepAlive(kept)
	runtime.KeepAlive(cleanups)
}

// A finalizer that keeps another finalizable object reachable delays it by
// a cycle: chains shorter than WithCycles are not leaks.
func TestFinalizerChainsAreNotLeaks(t *testing.T) {
	tests := []struct {
		name  string
		chain int
		give  []Option
	}{
		{name: "single", chain: 1},
		{name: "chain of 2, default cycles", chain: 2},
		{name: "chain of 5, 6 cycles", chain: 5, give: []Option{WithCycles(6)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatcher(t)
			var head *thing
			for range tt.chain {
				head = &thing{next: head}
				w.SetFinalizer(head, func(o *thing) { _ = o.next }) // marker: chain
			}
			head = nil
			ft := &fakeT{}
			VerifyNone(ft, append(tt.give, WithWatcher(w))...)
			if len(ft.errors) != 0 {
				t.Fatalf("chain of %d reported:\n%s", tt.chain, ft.errors[0])
			}
		})
	}
}

func TestDeadlineWithBlockedFinalizer(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	o := &thing{}
	w.SetFinalizer(o, func(*thing) { <-release }) // marker: blocked
	o = nil
	line := testkit.MarkerLine(t, "leaks_test.go", "blocked")

	start := time.Now()
	err := Find(WithWatcher(w), WithDeadline(300*time.Millisecond))
	took := time.Since(start)
	close(release) // let the finalizer goroutine go on, for the other tests
	testkit.AwaitGC(t, 20*time.Second, "the blocked finalizer to finish", func() bool { return ledgertest.Totals(w, finalizerwatch.KindFinalizer).Outstanding == 0 })

	if err == nil {
		t.Fatal("Find passed with a blocked finalizer")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) is false", err)
	}
	for _, want := range []string{
		"gave up after 300ms (WithDeadline) waiting for the finalizer queue to drain",
		fmt.Sprintf("leaks_test.go:%d\n", line),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if took > 5*time.Second {
		t.Errorf("Find took %v with a 300ms deadline", took)
	}
}

func TestClosedWatcherStillReports(t *testing.T) {
	w := newWatcher(t)
	kept := plantKept(w, 2)
	w.Close()
	var le *LeakError
	if err := Find(WithWatcher(w)); !errors.As(err, &le) {
		t.Fatalf("Find returned %v, want a *LeakError", err)
	}
	if len(le.Leaks) != 1 || le.Leaks[0].Leaked != 2 {
		t.Errorf("leaks %+v", le.Leaks)
	}
	if !strings.Contains(le.Error(), "GC clock did not advance") {
		t.Errorf("report does not say why ages are missing:\n%v", le)
	}
	runtime.KeepAlive(kept)
}

// The report says of each site whether it grows, with its growth, or is
// stable. (The order is the ledger's: a growing site first, however few
// registrations it leaked; finalizerwatch's ranking tests pin it.)
func TestLeakErrorSaysGrowingOrStable(t *testing.T) {
	site := func(fn string, class finalizerwatch.Class, growth, leaked uint64) Leak {
		return Leak{SiteStats: finalizerwatch.SiteStats{
			Kind: finalizerwatch.KindFinalizer, Class: class, Growth: growth,
			Site:   stackcapture.Frame{Function: fn, File: "/src/app/a.go", Line: 7},
			Counts: finalizerwatch.Counts{Registered: leaked, Outstanding: leaked}, Suspect: leaked,
		}, Leaked: leaked}
	}
	leaks := []Leak{site("app.leak", finalizerwatch.ClassGrowing, 12, 30), site("app.cache", finalizerwatch.ClassStable, 0, 900)}
	msg := (&LeakError{Leaks: leaks, Cycles: 3}).Error()
	for _, want := range []string{
		"finalizer app.leak /src/app/a.go:7\n\tregistered 30, outstanding 30, leaked 30\n\tsurvived:\n\tgrowing: +12 suspects over the last 4 GC cycles observed\n",
		"finalizer app.cache /src/app/a.go:7\n\tregistered 900, outstanding 900, leaked 900\n\tsurvived:\n\tstable: long-lived, not growing\n",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}
