package promexporter

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
)

// With K=1, the one per-site series of the finalizers goes to a leak of one
// object per GC cycle, not to a stable pool a hundred times its size, from
// the fifth cycle on; gcprobe_finalizers_growing tells the two apart.
func TestTopKPrefersGrowingSite(t *testing.T) {
	old := debug.SetGCPercent(-1) // one cycle per step, forced
	t.Cleanup(func() { debug.SetGCPercent(old) })
	t.Cleanup(func() { kept = nil })
	w := newWatcher(t)
	c := newCollector(t, WithWatcher(w), WithTopK(1))
	plantFinalizerLeak(w, 500) // the pool, filled once
	pool := siteLabel(t, plantFinalizerLeak, "finalizer-leak")
	leak := siteLabel(t, growFinalizerLeak, "finalizer-grow")
	for k := uint64(1); k <= 10; k++ {
		growFinalizerLeak(w, 1)
		runtime.GC()
		// testkit.Poll, not AwaitGC: one cycle per step, the one forced above.
		testkit.Poll(t, 30*time.Second, fmt.Sprintf("both clocks at %d", k), ledgertest.ClocksAt(w, k))
		fams := gather(t, c) // the one read of this cycle
		if k < 5 {
			continue
		}
		if v := series(t, fams, "gcprobe_finalizers_growing", "finalizer", leak).GetGauge().GetValue(); v != 1 {
			t.Fatalf("cycle %d: growing %v at the leak, want 1", k, v)
		}
		if v := series(t, fams, "gcprobe_finalizers_suspect_objects", "finalizer", leak).GetGauge().GetValue(); v != float64(k-2) {
			t.Fatalf("cycle %d: %v suspects at the leak, want %d", k, v, k-2)
		}
		if v := series(t, fams, "gcprobe_finalizers_suspect_objects", "finalizer", "other").GetGauge().GetValue(); v != 500 {
			t.Fatalf("cycle %d: %v suspects under other, want the pool's 500", k, v)
		}
		if v := series(t, fams, "gcprobe_finalizers_growing", "finalizer", "other").GetGauge().GetValue(); v != 0 {
			t.Fatalf("cycle %d: %v growing sites under other, want 0", k, v)
		}
		for _, m := range fams["gcprobe_finalizers_outstanding"].GetMetric() {
			if labels(m)[labelSite] == pool {
				t.Fatalf("cycle %d: the stable pool has a series of its own in the top 1", k)
			}
		}
	}
}
