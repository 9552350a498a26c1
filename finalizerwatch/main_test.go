package finalizerwatch

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// newWatcher returns a Watcher that the test closes. It detects no
// wrappers unless opts say so: the tests' helpers register for many
// callers, and a wrapper found joins the process's look-through set.
func newWatcher(t testing.TB, opts ...Option) *Watcher {
	t.Helper()
	w, err := New(append([]Option{WithWrapperDetection(false)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	w.init()
	t.Cleanup(w.Close)
	return w
}

// awaitCycles forces GC until both of w's clocks have advanced n cycles.
func awaitCycles(t testing.TB, w *Watcher, n uint64) {
	t.Helper()
	want := [2]uint64{w.cycleCount(KindFinalizer) + n, w.cycleCount(KindCleanup) + n}
	deadline := time.Now().Add(20 * time.Second)
	for w.cycleCount(KindFinalizer) < want[0] || w.cycleCount(KindCleanup) < want[1] {
		if time.Now().After(deadline) {
			t.Fatalf("GC clocks at %d/%d after 20s, want %d/%d", w.cycleCount(KindFinalizer), w.cycleCount(KindCleanup), want[0], want[1])
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // let the finalizer and cleanup goroutines run
	}
}

// await polls cond, forcing GC, until it holds or the deadline passes.
func await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// siteByLine finds the stats of the site on line in stats.
func siteByLine(stats []SiteStats, line int) (SiteStats, bool) {
	for _, s := range stats {
		if s.Site.Line == line {
			return s, true
		}
	}
	return SiteStats{}, false
}
