package finalizerwatch

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/gcprobe/probe/internal/testkit"
)

// thing is big enough never to be tiny-allocated.
type thing struct {
	p   *int
	buf [48]byte
}

var leakedThings = map[int]*thing{}

// plantSelfLeak registers finalizers whose closures reach their own
// objects: the objects can never be collected.
func plantSelfLeak(w *Watcher, n int) {
	for range n {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) { _ = o.buf }) // marker: self-leak
	}
}

// plantMapLeak keeps its objects in a global map.
func plantMapLeak(w *Watcher, n int) {
	for i := range n {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) {}) // marker: map-leak
		leakedThings[i] = o
	}
}

// churn registers and drops n objects.
func churn(w *Watcher, n int) {
	for range n {
		w.SetFinalizer(&thing{}, func(*thing) {}) // marker: churn
	}
}

func churnCleanups(w *Watcher, n int) {
	for i := range n {
		AddCleanupTo(w, &thing{}, func(int) {}, i) // marker: churn-cleanups
	}
}

func TestTopNamesPlantedLeaks(t *testing.T) {
	w := newWatcher(t)
	t.Cleanup(func() { clear(leakedThings) })
	plantSelfLeak(w, 10)
	plantMapLeak(w, 7)
	churn(w, 2000)
	churnCleanups(w, 2000)
	selfLine := testkit.MarkerLine(t, "leak_test.go", "self-leak")
	mapLine := testkit.MarkerLine(t, "leak_test.go", "map-leak")
	churnLine := testkit.MarkerLine(t, "leak_test.go", "churn")
	cleanLine := testkit.MarkerLine(t, "leak_test.go", "churn-cleanups")

	testkit.AwaitGC(t, 20*time.Second, "5 GC cycles", clocksAdvanced(w, 5))
	testkit.AwaitGC(t, 20*time.Second, "healthy sites to drain", func() bool {
		a, _ := siteByLine(w.siteList(), churnLine)
		b, _ := siteByLine(w.siteList(), cleanLine)
		return a.Outstanding == 0 && b.Outstanding == 0
	})

	top := w.top(3)
	if len(top) != 3 {
		t.Fatalf("Top(3) returned %d sites", len(top))
	}
	for i, want := range []struct {
		line       int
		registered uint64
	}{{selfLine, 10}, {mapLine, 7}} {
		s := top[i]
		if s.Site.Line != want.line || !strings.HasSuffix(s.Site.File, "leak_test.go") {
			t.Fatalf("Top(3)[%d] = %v, want leak_test.go:%d\nTop: %v", i, s.Site, want.line, top)
		}
		if s.Registered != want.registered || s.Outstanding != want.registered || s.Suspect != want.registered {
			t.Errorf("%v: registered %d outstanding %d suspect %d, want %d of each", s.Site, s.Registered, s.Outstanding, s.Suspect, want.registered)
		}
		if s.Executed != 0 || s.Kind != KindFinalizer || s.Class == ClassChurn {
			t.Errorf("%v: executed %d kind %v class %v", s.Site, s.Executed, s.Kind, s.Class)
		}
	}
	if !strings.Contains(top[0].Site.Function, "plantSelfLeak") || !strings.Contains(top[1].Site.Function, "plantMapLeak") {
		t.Errorf("sites name %q and %q", top[0].Site.Function, top[1].Site.Function)
	}
	for _, line := range []int{churnLine, cleanLine} {
		s, ok := siteByLine(w.siteList(), line)
		if !ok {
			t.Fatalf("no site for line %d", line)
		}
		if s.Registered != 2000 || s.Executed != 2000 || s.Outstanding != 0 || s.Suspect != 0 || s.Class != ClassChurn {
			t.Errorf("healthy %v: registered %d executed %d outstanding %d suspect %d class %v", s.Site, s.Registered, s.Executed, s.Outstanding, s.Suspect, s.Class)
		}
		// One run in DurationSampleRate is timed: Binomial(2000, 1/8) runs,
		// mean 250 and standard deviation 15; six either way, scaled.
		if c := s.Duration.Count; c%DurationSampleRate != 0 || c < 8*(250-6*15) || c > 8*(250+6*15) {
			t.Errorf("healthy %v: %d run times estimated, want a multiple of %d near 2000", s.Site, c, DurationSampleRate)
		}
	}
}

func TestSuspectsAgeWithCycles(t *testing.T) {
	var w *Watcher
	t.Cleanup(func() { clear(leakedThings) })
	line := testkit.MarkerLine(t, "leak_test.go", "map-leak")
	// A GC may run at any time; retry until the registrations were made
	// within one cycle, so their age is known exactly.
	var born uint64
	for {
		clear(leakedThings)
		w = newWatcher(t, WithSuspectCycles(2))
		born = w.cycleCount(KindFinalizer)
		plantMapLeak(w, 3)
		if w.cycleCount(KindFinalizer) == born {
			break
		}
	}
	// ageAtLeast checks the site's age distribution at the current age,
	// which must be at least min (a GC may run at any time, so the clock
	// can be ahead of what the test forced), and returns that age.
	ageAtLeast := func(min uint64) uint64 {
		t.Helper()
		for {
			now := w.cycleCount(KindFinalizer)
			s, _ := siteByLine(w.siteList(), line)
			if w.cycleCount(KindFinalizer) != now {
				continue // a cycle ended while reading
			}
			age := now - born
			if age < min || age >= AgeBuckets-1 {
				t.Fatalf("%d cycles passed, want at least %d (and fewer than %d)", age, min, AgeBuckets-1)
			}
			var wantSuspect uint64
			if age >= 2 {
				wantSuspect = 3
			}
			if s.Survived[age] != 3 || s.Suspect != wantSuspect || s.Outstanding != 3 {
				t.Fatalf("after %d cycles: survived %v suspect %d outstanding %d", age, s.Survived, s.Suspect, s.Outstanding)
			}
			return age
		}
	}
	age := ageAtLeast(0)
	for age < 2 {
		testkit.AwaitGC(t, 20*time.Second, "a GC cycle", clocksAdvanced(w, 1))
		age = ageAtLeast(age + 1)
	}
	// Past the ring's window the ages pool in the last bucket.
	testkit.AwaitGC(t, 20*time.Second, "AgeBuckets GC cycles", clocksAdvanced(w, AgeBuckets))
	s, _ := siteByLine(w.siteList(), line)
	if s.Survived[AgeBuckets-1] != 3 || s.Suspect != 3 || s.Outstanding != 3 {
		t.Fatalf("after %d cycles: survived %v suspect %d", AgeBuckets+2, s.Survived, s.Suspect)
	}
	// Three suspects, made once: a burst, not a leak.
	if s.Class != ClassStable {
		t.Fatalf("class %v, want stable", s.Class)
	}
}

func TestClearingLeavesNothingOutstanding(t *testing.T) {
	w := newWatcher(t)
	things := make([]*thing, 5)
	for i := range things {
		things[i] = &thing{}
		w.SetFinalizer(things[i], func(*thing) { t.Error("cleared finalizer ran") }) // marker: cleared
	}
	for _, o := range things {
		w.SetFinalizer(o, nil)
	}
	var got []int
	var cleanups []Cleanup
	kept := make([]*thing, 4)
	for i := range kept {
		kept[i] = &thing{}
		c := AddCleanupTo(w, kept[i], func(arg int) { got = append(got, arg) }, 100+i) // marker: stopped
		cleanups = append(cleanups, c)
	}
	for _, c := range cleanups[:3] {
		c.Stop()
		c.Stop() // a second Stop changes nothing
	}
	// Reachable across Stop, as runtime.Cleanup.Stop requires; unreachable
	// from here on, so that the fourth cleanup runs.
	runtime.KeepAlive(kept)
	things = nil
	finLine := testkit.MarkerLine(t, "leak_test.go", "cleared")
	cleanLine := testkit.MarkerLine(t, "leak_test.go", "stopped")
	testkit.AwaitGC(t, 20*time.Second, "the one cleanup left to run", func() bool {
		s, _ := siteByLine(w.siteList(), cleanLine)
		return s.Executed == 1
	})
	fin, _ := siteByLine(w.siteList(), finLine)
	if fin.Registered != 5 || fin.Cleared != 5 || fin.Outstanding != 0 || fin.Executed != 0 {
		t.Errorf("finalizers: %+v", fin)
	}
	cl, _ := siteByLine(w.siteList(), cleanLine)
	if cl.Registered != 4 || cl.Cleared != 3 || cl.Executed != 1 || cl.Outstanding != 0 || cl.Kind != KindCleanup {
		t.Errorf("cleanups: registered %d cleared %d executed %d outstanding %d", cl.Registered, cl.Cleared, cl.Executed, cl.Outstanding)
	}
	if len(got) != 1 || got[0] != 103 {
		t.Errorf("cleanup received %v, want [103]", got)
	}
	if n := objs.count(w); n != 0 {
		t.Errorf("address table holds %d entries after clearing", n)
	}
}

func TestFinalizerReceivesItsObject(t *testing.T) {
	w := newWatcher(t)
	// A named pointer parameter is accepted only for an object type
	// without methods, as the runtime's check has it (*thing has Close):
	// see hasUncommon.
	type bare thing
	type named *bare
	results := make(chan string, 4)
	mk := func(tag byte) *thing { o := &thing{}; o.buf[0] = tag; return o }
	w.SetFinalizer(mk('p'), func(o *thing) { results <- "ptr:" + string(o.buf[0]) })
	w.SetFinalizer(mk('a'), func(o any) { results <- "any:" + string(o.(*thing).buf[0]) })
	w.SetFinalizer(mk('r'), func(o *thing) int { results <- "ret:" + string(o.buf[0]); return 1 })
	w.SetFinalizer((*bare)(mk('n')), func(o named) { results <- "named:" + string((*bare)(o).buf[0]) })
	seen := map[string]bool{}
	testkit.AwaitGC(t, 20*time.Second, "four finalizers", func() bool {
		for {
			select {
			case r := <-results:
				seen[r] = true
			default:
				return len(seen) == 4
			}
		}
	})
	for _, want := range []string{"ptr:p", "any:a", "ret:r", "named:n"} {
		if !seen[want] {
			t.Errorf("missing %s in %v", want, seen)
		}
	}
}

type closer interface{ Close() }

func (*thing) Close() {}

func TestFinalizerWithInterfaceParameter(t *testing.T) {
	w := newWatcher(t)
	ran := make(chan bool, 1)
	w.SetFinalizer(&thing{}, func(c closer) { _, ok := c.(*thing); ran <- ok })
	testkit.AwaitGC(t, 20*time.Second, "the finalizer", func() bool { return len(ran) == 1 })
	if !<-ran {
		t.Fatal("finalizer got the wrong object")
	}
}

// The watcher must not keep registered objects alive: they are collected
// exactly as with the runtime's own calls.
func TestNothingKeptAlive(t *testing.T) {
	w := newWatcher(t)
	tests := []struct {
		name     string
		register func(*thing)
	}{
		{"runtime.SetFinalizer", func(o *thing) { runtime.SetFinalizer(o, func(*thing) {}) }},
		{"Watcher.SetFinalizer", func(o *thing) { w.SetFinalizer(o, func(*thing) {}) }},
		{"runtime.AddCleanup", func(o *thing) { runtime.AddCleanup(o, func(int) {}, 0) }},
		{"AddCleanupTo", func(o *thing) { AddCleanupTo(w, o, func(int) {}, 0) }},
		{"AddCleanupTo, then Stop", func(o *thing) { AddCleanupTo(w, o, func(int) {}, 0).Stop() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &thing{}
			tt.register(o)
			wp := weak.Make(o)
			o = nil
			testkit.AwaitGC(t, 20*time.Second, "the object to be collected", func() bool { return wp.Value() == nil })
		})
	}
}

// TestFullSiteTableCountsUnderOverflow checks that once the site table is
// full, registrations from new lines are counted under the overflow entry,
// exactly, without capturing or keeping their stacks.
func TestFullSiteTableCountsUnderOverflow(t *testing.T) {
	w := newWatcher(t, WithMaxSites(1))
	keep := make([]*thing, 0, 4)
	reg := func() { // one line: takes the only site
		o := &thing{}
		w.SetFinalizer(o, func(*thing) {})
		keep = append(keep, o)
	}
	reg()
	stacks := w.stacks.Len()
	for range 3 {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) {}) // a second line: no room
		keep = append(keep, o)
	}
	if ov := w.overflowNow(); ov.Sites != 3 {
		t.Fatalf("overflow counted %d registrations, want 3", ov.Sites)
	}
	if got := w.stacks.Len(); got != stacks {
		t.Fatalf("stacks kept went from %d to %d: a registration with no room for its site captured its stack", stacks, got)
	}
	for _, o := range keep {
		w.SetFinalizer(o, nil)
	}
	if tot := w.totals(KindFinalizer); tot.Registered != 4 || tot.Cleared != 4 || tot.Outstanding != 0 {
		t.Fatalf("totals %+v, want 4 registered and cleared", tot)
	}
}
