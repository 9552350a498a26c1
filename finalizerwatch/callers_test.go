package finalizerwatch

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// A helper named by the option is looked through: what each caller
// registers through it is counted at its own line, with the helper in the
// stack, the same through an interface method. Without the option, it
// stays the site (the ledger finds helpers by itself only for what the
// standard library registers: TestRuntimeModeWrapperDroppedAtCaller).
func TestWrapperCountedAtCallers(t *testing.T) {
	t.Cleanup(func() { stackcapture.SetLookThrough() })
	for _, viaFS := range []bool{false, true} {
		name, helper, keepM, dropM := "function", "w-helper", "w-keep", "w-drop"
		fn := "github.com/gcprobe/probe/finalizerwatch.openThing"
		if viaFS {
			name, helper, keepM, dropM = "interface method", "w-fs", "w-keep-fs", "w-drop-fs"
			fn = "github.com/gcprobe/probe/finalizerwatch.osThings.Open"
		}
		t.Run(name, func(t *testing.T) {
			helperLine := testkit.MarkerLine(t, "callers_test.go", helper)
			keepLine := testkit.MarkerLine(t, "callers_test.go", keepM)
			dropLine := testkit.MarkerLine(t, "callers_test.go", dropM)
			for _, option := range []bool{false, true} {
				names := []string(nil)
				if option {
					names = []string{fn}
				}
				if err := stackcapture.SetLookThrough(names...); err != nil {
					t.Fatal(err)
				}
				w := newWatcher(t, WithWrapperDetection(true))
				var ran atomic.Int64
				var kept []*thing
				keepThroughHelper(w, &ran, &kept, viaFS)
				testkit.AwaitGC(t, 20*time.Second, "a GC cycle", clocksAdvanced(w, 1))
				dropThroughHelper(w, &ran, viaFS)
				for range 50 {
					keepThroughHelper(w, &ran, &kept, viaFS)
					dropThroughHelper(w, &ran, viaFS)
				}
				testkit.AwaitGC(t, 20*time.Second, "the dropped objects' finalizers", func() bool { return ran.Load() >= 51 })
				sites := w.siteList()
				h, _ := siteByLine(sites, helperLine)
				if !option {
					if h.Registered != 102 {
						t.Errorf("without the option: the helper's line has %d registered, want all 102:\n%v", h.Registered, lineCounts(sites))
					}
					runtime.KeepAlive(kept)
					continue
				}
				k, okK := siteByLine(sites, keepLine)
				d, okD := siteByLine(sites, dropLine)
				if !okK || !okD || h.Registered != 0 {
					t.Fatalf("with the option: want sites at the callers' lines %d and %d and none at the helper's:\n%v", keepLine, dropLine, lineCounts(sites))
				}
				if k.Registered != 51 || k.Outstanding != 51 || k.Executed != 0 {
					t.Errorf("keeping caller: %+v, want 51 registered, 51 outstanding", k.Counts)
				}
				if d.Registered != 51 || d.Outstanding != 0 || d.Executed != 51 {
					t.Errorf("dropping caller: %+v, want 51 registered and run", d.Counts)
				}
				if !stackHas(k.Stack, helperLine) {
					t.Errorf("the keeping caller's stack does not keep the helper (line %d): %v", helperLine, k.Stack)
				}
				runtime.KeepAlive(kept)
			}
		})
	}
}

// One caller: the helper is the site, as before. Two callers of a helper
// that sets finalizers on its own type leave it the site, detection on:
// a table of such helpers called through one line must not all be
// counted at that line.
func TestHelperOfOneCallerIsTheSite(t *testing.T) {
	helperLine := testkit.MarkerLine(t, "callers_test.go", "w-single")
	w := newWatcher(t, WithWrapperDetection(true))
	var kept []*thing
	for range 3 {
		for range 10 {
			kept = append(kept, openSingle(w))
		}
		testkit.AwaitGC(t, 20*time.Second, "a GC cycle", clocksAdvanced(w, 1))
	}
	s, ok := siteByLine(w.siteList(), helperLine)
	if !ok || s.Registered != 30 {
		t.Fatalf("the helper of one caller: %+v, want 30 registered at its line", s.Counts)
	}
	runtime.KeepAlive(kept)
}

func TestHelperOfOwnTypeStaysTheSite(t *testing.T) {
	helperLine := testkit.MarkerLine(t, "callers_test.go", "w-off")
	w := newWatcher(t, WithWrapperDetection(true))
	var kept []*thing
	for range 3 {
		kept = append(kept, openOff(w), openOff(w))
		testkit.AwaitGC(t, 20*time.Second, "a GC cycle", clocksAdvanced(w, 1))
		kept = append(kept, openOff(w))
	}
	if s, ok := siteByLine(w.siteList(), helperLine); !ok || s.Registered != 9 {
		t.Fatalf("a helper of its own type with two callers: %+v at its line, want 9 registered", s.Counts)
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
