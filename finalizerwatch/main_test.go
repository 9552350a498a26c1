package finalizerwatch

import (
	"testing"

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

// clocksAdvanced returns, for testkit.AwaitGC, the condition that both of
// w's GC clocks have advanced n cycles from where they are now.
func clocksAdvanced(w *Watcher, n uint64) func() bool {
	want := [2]uint64{w.cycleCount(KindFinalizer) + n, w.cycleCount(KindCleanup) + n}
	return func() bool {
		return w.cycleCount(KindFinalizer) >= want[0] && w.cycleCount(KindCleanup) >= want[1]
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
