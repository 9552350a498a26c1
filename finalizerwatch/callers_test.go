package finalizerwatch

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// openThing is a helper that only forwards to the registering call, as a
// filesystem's one-line Open does.
//
//go:noinline
func openThing(w *Watcher, ran *atomic.Int64) *thing {
	o := &thing{}
	w.SetFinalizer(o, func(*thing) { ran.Add(1) }) // marker: w-helper
	return o
}

// thingFS is an fs.FS-like interface; osThings its one implementation,
// whose Open forwards to the registering call.
type thingFS interface {
	Open(w *Watcher, ran *atomic.Int64) *thing
}

type osThings struct{}

func (osThings) Open(w *Watcher, ran *atomic.Int64) *thing {
	o := &thing{}
	w.SetFinalizer(o, func(*thing) { ran.Add(1) }) // marker: w-fs
	return o
}

// fsys is a variable, so that calls through it stay interface calls.
var fsys thingFS = osThings{}

// The two callers of each helper: one keeps what it opens (a leak), the
// other drops it.
func keepThroughHelper(w *Watcher, ran *atomic.Int64, kept *[]*thing, viaFS bool) {
	if viaFS {
		*kept = append(*kept, fsys.Open(w, ran)) // marker: w-keep-fs
		return
	}
	*kept = append(*kept, openThing(w, ran)) // marker: w-keep
}

func dropThroughHelper(w *Watcher, ran *atomic.Int64, viaFS bool) {
	if viaFS {
		_ = fsys.Open(w, ran) // marker: w-drop-fs
		return
	}
	_ = openThing(w, ran) // marker: w-drop
}

// A helper that forwards for two callers is looked through: once the
// ledger has seen the two callers' lines, what each registers is counted
// at its own line, with the helper in the stack, and the helper's entry
// keeps what it counted before. Side by side, the same registrations
// through the helper made by one caller stay at the helper's line.
func TestWrapperCountedAtCallers(t *testing.T) {
	t.Cleanup(func() { stackcapture.SetLookThrough() })
	for _, viaFS := range []bool{false, true} {
		name, helper, keepM, dropM := "function", "w-helper", "w-keep", "w-drop"
		if viaFS {
			name, helper, keepM, dropM = "interface method", "w-fs", "w-keep-fs", "w-drop-fs"
		}
		t.Run(name, func(t *testing.T) {
			helperLine := testkit.MarkerLine(t, "callers_test.go", helper)
			keepLine := testkit.MarkerLine(t, "callers_test.go", keepM)
			dropLine := testkit.MarkerLine(t, "callers_test.go", dropM)
			w := newWatcher(t, WithWrapperDetection(true))
			var ran atomic.Int64
			var kept []*thing
			// Cycle 0: the helper's first registration, by the keeping
			// caller; cycle 1's first, by the dropping one.
			keepThroughHelper(w, &ran, &kept, viaFS)
			awaitCycles(t, w, 1)
			dropThroughHelper(w, &ran, viaFS)
			for range 50 {
				keepThroughHelper(w, &ran, &kept, viaFS)
				dropThroughHelper(w, &ran, viaFS)
			}
			await(t, "the dropped objects' finalizers", func() bool { return ran.Load() >= 50 })
			sites := w.siteList()
			h, _ := siteByLine(sites, helperLine)
			k, okK := siteByLine(sites, keepLine)
			d, okD := siteByLine(sites, dropLine)
			if !okK || !okD {
				t.Fatalf("no site at the callers' lines %d and %d:\n%v", keepLine, dropLine, lineCounts(sites))
			}
			if k.Registered != 50 || k.Outstanding != 50 || k.Executed != 0 {
				t.Errorf("keeping caller: %+v, want 50 registered, 50 outstanding", k.Counts)
			}
			if d.Registered != 50 || d.Outstanding != 0 || d.Executed != 50 {
				t.Errorf("dropping caller: %+v, want 50 registered and run", d.Counts)
			}
			if h.Registered != 2 {
				t.Errorf("helper's own entry: %d registered, want the 2 made before its second caller was seen", h.Registered)
			}
			if !stackHas(k.Stack, helperLine) {
				t.Errorf("the keeping caller's stack does not keep the helper (line %d): %v", helperLine, k.Stack)
			}
			runtime.KeepAlive(kept)
		})
	}
}

// One caller: the helper is the site, as before. And with the detection
// off, two callers leave the helper the site.
func TestHelperOfOneCallerIsTheSite(t *testing.T) {
	helperLine := testkit.MarkerLine(t, "callers_test.go", "w-single")
	w := newWatcher(t, WithWrapperDetection(true))
	var kept []*thing
	for range 3 {
		for range 10 {
			kept = append(kept, openSingle(w))
		}
		awaitCycles(t, w, 1)
	}
	s, ok := siteByLine(w.siteList(), helperLine)
	if !ok || s.Registered != 30 {
		t.Fatalf("the helper of one caller: %+v, want 30 registered at its line", s.Counts)
	}
	runtime.KeepAlive(kept)
}

func TestWrapperDetectionOff(t *testing.T) {
	helperLine := testkit.MarkerLine(t, "callers_test.go", "w-off")
	w := newWatcher(t) // detection off
	var kept []*thing
	for range 3 {
		kept = append(kept, openOff(w), openOff(w))
		awaitCycles(t, w, 1)
		kept = append(kept, openOff(w))
	}
	if s, ok := siteByLine(w.siteList(), helperLine); !ok || s.Registered != 9 {
		t.Fatalf("with the detection off: %+v at the helper's line, want 9 registered", s.Counts)
	}
	runtime.KeepAlive(kept)
}

//go:noinline
func openOff(w *Watcher) *thing {
	o := &thing{}
	w.SetFinalizer(o, func(*thing) {}) // marker: w-off
	return o
}

//go:noinline
func openSingle(w *Watcher) *thing {
	o := &thing{}
	w.SetFinalizer(o, func(*thing) {}) // marker: w-single
	return o
}

// openInlined is a helper the compiler inlines into its callers: each
// caller's copy is an entry of its own, named by the helper's line,
// until the option names the helper.
func openInlined(w *Watcher) *thing {
	o := &thing{}
	w.SetFinalizer(o, func(*thing) {}) // marker: w-inl
	return o
}

func TestLookThroughOption(t *testing.T) {
	t.Cleanup(func() { stackcapture.SetLookThrough() })
	if err := stackcapture.SetLookThrough("not a name"); err == nil || !strings.Contains(err.Error(), "SetLookThrough") {
		t.Errorf("SetLookThrough with a space: %v, want an error naming it", err)
	}
	if err := stackcapture.SetLookThrough("github.com/gcprobe/probe/finalizerwatch.openInlined"); err != nil {
		t.Fatal(err)
	}
	a := testkit.MarkerLine(t, "callers_test.go", "w-inl-a")
	b := testkit.MarkerLine(t, "callers_test.go", "w-inl-b")
	w := newWatcher(t)
	var kept []*thing
	for range 20 {
		kept = append(kept, openInlined(w)) // marker: w-inl-a
	}
	for range 30 {
		kept = append(kept, openInlined(w)) // marker: w-inl-b
	}
	sites := w.siteList()
	sa, okA := siteByLine(sites, a)
	sb, okB := siteByLine(sites, b)
	if !okA || !okB || sa.Registered != 20 || sb.Registered != 30 {
		t.Fatalf("with the option: %d at line %d, %d at line %d; want 20 and 30:\n%v", sa.Registered, a, sb.Registered, b, lineCounts(sites))
	}
	runtime.KeepAlive(kept)
}

func stackHas(stack []stackcapture.Frame, line int) bool {
	for _, f := range stack {
		if f.Line == line && strings.HasSuffix(f.File, "callers_test.go") {
			return true
		}
	}
	return false
}

func lineCounts(sites []SiteStats) map[int]uint64 {
	m := map[int]uint64{}
	for _, s := range sites {
		m[s.Site.Line] += s.Registered
	}
	return m
}
