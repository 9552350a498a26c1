package finalizerwatch

import (
	"context"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/bounded"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// forcedCycles reads the runtime's count of forced GC cycles.
func forcedCycles(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("%s is not supported", s[0].Name)
	}
	return s[0].Value.Uint64()
}

// forcedCallsAt returns the calls ForcedGCSites counts at line of this
// file.
func forcedCallsAt(line int) uint64 {
	for _, s := range ForcedGCSites(nil) {
		if filepath.Base(s.Site.File) == "forcedgc_test.go" && s.Site.Line == line {
			return s.Calls
		}
	}
	return 0
}

//go:noinline
func forceWithGC(n int) {
	for range n {
		runtime.GC() // marker: runtime.GC
	}
}

//go:noinline
func forceWithFreeOSMemory(n int) {
	for range n {
		debug.FreeOSMemory() // marker: FreeOSMemory
	}
}

// TestRuntimeModeForcedGC calls runtime.GC N times at one line and
// debug.FreeOSMemory M times at another, on one goroutine (concurrent
// calls may share a cycle): ForcedGCSites names both lines with exactly
// those calls, FreeOSMemory's at its caller's line, not runtime/debug's,
// and the runtime's own count of forced cycles moved by at least N+M.
// While detached, calls are not counted.
func TestRuntimeModeForcedGC(t *testing.T) {
	needRuntimeMode(t)
	gcLine := testkit.MarkerLine(t, "forcedgc_test.go", "runtime.GC")
	freeLine := testkit.MarkerLine(t, "forcedgc_test.go", "FreeOSMemory")
	detach, err := Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	if !RuntimeModeForcedGC() {
		t.Fatal("RuntimeModeForcedGC is false with a Watcher attached")
	}

	const n, m = 7, 5
	gc0, free0, cycles0 := forcedCallsAt(gcLine), forcedCallsAt(freeLine), forcedCycles(t)
	forceWithGC(n)
	forceWithFreeOSMemory(m)
	gc1, free1, cycles1 := forcedCallsAt(gcLine), forcedCallsAt(freeLine), forcedCycles(t)
	if gc1-gc0 != n || free1-free0 != m {
		t.Errorf("ForcedGCSites counts %d calls at line %d (runtime.GC) and %d at line %d (FreeOSMemory), want %d and %d:\n%v",
			gc1-gc0, gcLine, free1-free0, freeLine, n, m, ForcedGCSites(nil))
	}
	if cycles1-cycles0 < n+m {
		t.Errorf("/gc/cycles/forced:gc-cycles moved by %d, want at least %d", cycles1-cycles0, n+m)
	}
	sites := ForcedGCSites(nil)
	for i, s := range sites {
		if strings.HasPrefix(s.Site.Function, "runtime") && s.Site.Function != forcedNoLineFrame.Function {
			t.Errorf("a site in the runtime or runtime/debug: %v", s.Site)
		}
		if i > 0 && sites[i-1].Calls < s.Calls {
			t.Errorf("not most calls first: %v", sites)
		}
	}
	for _, want := range []struct {
		line int
		fn   string
	}{{gcLine, "finalizerwatch.forceWithGC"}, {freeLine, "finalizerwatch.forceWithFreeOSMemory"}} {
		found := false
		for _, s := range sites {
			if s.Site.Line == want.line && filepath.Base(s.Site.File) == "forcedgc_test.go" {
				found = true
				if !strings.HasSuffix(s.Site.Function, want.fn) {
					t.Errorf("line %d is named %q, want %s", want.line, s.Site.Function, want.fn)
				}
			}
		}
		if !found {
			t.Errorf("no site at line %d: %v", want.line, sites)
		}
	}

	// The table is the process's: a second attachment nests, and calls
	// go on being counted until the last detach.
	detach()
	if RuntimeModeForcedGC() {
		t.Skip("another attachment is still open: the rest needs the hooks detached")
	}
	forceWithGC(2)
	if got := forcedCallsAt(gcLine); got != gc1 {
		t.Errorf("detached, runtime.GC was counted: %d calls, want %d", got, gc1)
	}
}

// TestRuntimeModeForcedGCOnOthersGoroutines: runtime.GC run as the
// function of a goroutine the standard library started (context.AfterFunc)
// has no line of the program's on its stack; it is counted at the line
// that caused the goroutine, the cancel. On a timer's goroutine
// (time.AfterFunc), which no line caused, it is counted under the entry
// that says so, never at a frame of the toolchain's.
func TestRuntimeModeForcedGCOnOthersGoroutines(t *testing.T) {
	needRuntimeMode(t)
	cancelLine := testkit.MarkerLine(t, "forcedgc_test.go", "cancel")
	detach, err := Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer detach()

	before := forcedCallsAt(cancelLine)
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(ctx, runtime.GC)
	cancel() // marker: cancel
	testkit.Poll(t, 30*time.Second, "runtime.GC on context.AfterFunc's goroutine counted at the cancel", func() bool {
		return forcedCallsAt(cancelLine) == before+1
	})

	noLine := forcedNoLine.calls.Load()
	time.AfterFunc(0, runtime.GC)
	testkit.Poll(t, 30*time.Second, "runtime.GC on a timer's goroutine counted without a line", func() bool {
		return forcedNoLine.calls.Load() == noLine+1
	})
	for _, s := range ForcedGCSites(nil) {
		if s.Site.Function == forcedNoLineFrame.Function && s.Site.File != forcedNoLineFrame.File {
			t.Errorf("a call counted at a frame of the runtime's: %v", s.Site)
		}
		if strings.HasPrefix(s.Site.Function, "time.") || strings.HasPrefix(s.Site.Function, "context.") {
			t.Errorf("a call counted at a frame of the standard library's: %v", s.Site)
		}
	}
}

// TestForcedGCHookAllocs: after a line's first call, the hook counts a
// call of runtime.GC at that line (the cache's path) and one from the
// runtime's frame (FreeOSMemory's path, a walk up the stack) without
// allocating. The hook is called directly, so that the test runs in every
// build and measures the hook, not the GC cycle.
func TestForcedGCHookAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters")
	}
	rtMu.Lock()
	forcedInit()
	rtMu.Unlock()
	pc := stackcapture.CallerPC(0) // this function's line: a site of the program's
	viaRuntime := uintptr(0)       // no PC of the stack: the walk starts above the hook's frames
	for _, tt := range []struct {
		name string
		give uintptr
	}{{"direct", pc}, {"through the runtime", viaRuntime}} {
		t.Run(tt.name, func(t *testing.T) {
			rtForcedGC(tt.give) // the line's first call
			before := forcedTotal()
			if a := testing.AllocsPerRun(100, func() { rtForcedGC(tt.give) }); a != 0 {
				t.Errorf("%.1f allocations per call", a)
			}
			if got := forcedTotal() - before; got != 101 { // AllocsPerRun runs it once more first
				t.Errorf("the hook counted %d calls, want 101", got)
			}
		})
	}
}

// TestForcedGCTableBounded: past its limit the table counts new lines
// under the overflow entry, and the lines it holds as before.
func TestForcedGCTableBounded(t *testing.T) {
	m := bounded.New[uintptr, forcedSite](2)
	a, b, c := stackcapture.CallerPC(0), stackcapture.CallerPC(0), stackcapture.CallerPC(0)
	sa, sb := forcedSiteAt(m, a), forcedSiteAt(m, b)
	if sa == &forcedOverflow || sb == &forcedOverflow || sa == sb {
		t.Fatal("two lines did not get an entry each")
	}
	if s := forcedSiteAt(m, c); s != &forcedOverflow {
		t.Errorf("a third line in a table of two got %+v, want the overflow entry", s)
	}
	if forcedSiteAt(m, a) != sa {
		t.Error("a line held lost its entry once the table was full")
	}
	if sa.frame == nil || filepath.Base(sa.frame.File) != "forcedgc_test.go" || !strings.HasSuffix(sa.frame.Function, "TestForcedGCTableBounded") {
		t.Errorf("the line's frame is %v, want this test's", sa.frame)
	}
}

// forcedTotal sums the calls the table counts, overflow and calls without
// a line included.
func forcedTotal() uint64 {
	n := forcedOverflow.calls.Load() + forcedNoLine.calls.Load()
	forcedTable.Load().Range(func(_ uintptr, s *forcedSite) bool {
		n += s.calls.Load()
		return true
	})
	return n
}

// TestForcedGCSitesOutsideRuntimeMode: a build without the runtime build
// mode counts nothing, and says so.
func TestForcedGCSitesOutsideRuntimeMode(t *testing.T) {
	if RuntimeMode() {
		t.Skip("built in the runtime build mode")
	}
	forceWithGC(1)
	forceWithFreeOSMemory(1)
	if got := ForcedGCSites(nil); len(got) != 0 {
		t.Errorf("ForcedGCSites outside the runtime mode: %v, want none", got)
	}
	dst := []ForcedGCSite{{Calls: 1}}
	if got := ForcedGCSites(dst); len(got) != 1 {
		t.Errorf("ForcedGCSites appended %v to dst", got[1:])
	}
	if _, err := newWatcher(t).AttachRuntime(); err != ErrNoRuntimeMode {
		t.Errorf("AttachRuntime: %v, want ErrNoRuntimeMode", err)
	}
	if RuntimeModeForcedGC() {
		t.Error("RuntimeModeForcedGC is true outside the runtime mode")
	}
}

// BenchmarkForcedGCHook is runtime.GC's hook alone, as the runtime mode
// calls it, for a line seen before: a direct call (the cache) and one
// through the runtime (FreeOSMemory's: a walk of this stack).
func BenchmarkForcedGCHook(b *testing.B) {
	rtMu.Lock()
	forcedInit()
	rtMu.Unlock()
	for _, bb := range []struct {
		name string
		pc   uintptr
	}{
		{"direct", stackcapture.CallerPC(0)},
		{"through the runtime", 0},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rtForcedGC(bb.pc)
			}
		})
	}
}
