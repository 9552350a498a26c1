package finalizerwatch

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gcprobe/probe/stackcapture"

	"github.com/gcprobe/probe/internal/testkit"
)

// 64 goroutines register 100 000 times each, from four sites, clearing one
// registration in ten: every count must be exact, and once the objects are
// collected and the queues drained nothing may be outstanding.
func TestConcurrentRegistrationsExact(t *testing.T) {
	const goroutines = 64
	per := concurrentPerGoroutine
	w := newWatcher(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				switch o := (&thing{}); (g + i) % 4 {
				case 0:
					w.SetFinalizer(o, func(*thing) {}) // marker: conc-fin
				case 1:
					w.SetFinalizer(o, func(*thing) {}) // marker: conc-fin-cleared
					if i%10 == 1 {
						w.SetFinalizer(o, nil)
					}
				case 2:
					AddCleanupTo(w, o, func(int) {}, i) // marker: conc-cleanup
				case 3:
					c := AddCleanupTo(w, o, func(int) {}, i) // marker: conc-cleanup-stopped
					if i%10 == 3 {
						c.Stop()
						// Reachable across Stop, as runtime.Cleanup.Stop
						// requires: otherwise the runtime may have queued
						// the cleanup already, and it runs (and counts as
						// executed, not cleared).
						runtime.KeepAlive(o)
					}
				}
			}
		}()
	}
	wg.Wait()
	perSite := uint64(goroutines * per / 4)
	clearedPerSite := uint64(0)
	for g := range goroutines {
		for i := range per {
			if (g+i)%4 == 1 && i%10 == 1 {
				clearedPerSite++
			}
		}
	}
	lines := map[string]int{}
	for _, m := range []string{"conc-fin", "conc-fin-cleared", "conc-cleanup", "conc-cleanup-stopped"} {
		lines[m] = testkit.MarkerLine(t, "concurrency_test.go", m)
	}
	check := func(drained bool) bool {
		ok := true
		for m, line := range lines {
			s, found := siteByLine(w.siteList(), line)
			if !found {
				t.Fatalf("no site for %s", m)
			}
			if s.Registered != perSite {
				t.Fatalf("%s: registered %d, want %d", m, s.Registered, perSite)
			}
			wantCleared := uint64(0)
			if m == "conc-fin-cleared" || m == "conc-cleanup-stopped" {
				wantCleared = clearedPerSite // the same i%10 pattern
			}
			// While finalizers run, a finalizer's Cleared (its ends beyond
			// its runs) may read low for an instant, never high (see
			// countsLocked): exact once drained.
			if s.Cleared > wantCleared {
				t.Fatalf("%s: cleared %d, want %d", m, s.Cleared, wantCleared)
			}
			if s.Cleared != wantCleared {
				ok = false
			}
			if s.Executed+s.Cleared+s.Outstanding != s.Registered {
				t.Fatalf("%s: executed %d + cleared %d + outstanding %d != registered %d", m, s.Executed, s.Cleared, s.Outstanding, s.Registered)
			}
			if drained && s.Outstanding != 0 {
				ok = false
			}
		}
		return ok
	}
	// A Stop counts once it is known not to run (see Cleanup.Stop), and
	// it is settled once the runtime's cleanup queue has emptied.
	testkit.AwaitGC(t, 20*time.Second, "the Stops settled", func() bool { return settleStops(false) == 0 })
	check(false)
	testkit.AwaitGC(t, 60*time.Second, "every registration run or cleared, and every clear counted", func() bool { return check(true) })
	if n := objs.count(w); n != 0 {
		t.Fatalf("address table holds %d entries after the drain", n)
	}
}

// distinctStacks registers one cleanup from each of 2^depth distinct call
// paths: at every level it descends through one of two functions.
func distinctStacks(w *Watcher, depth, path int) {
	if depth == 0 {
		AddCleanupTo(w, &thing{}, func(int) {}, 0) // marker: distinct-stacks
		return
	}
	if path&1 == 0 {
		stackLeft(w, depth-1, path>>1)
	} else {
		stackRight(w, depth-1, path>>1)
	}
}

//go:noinline
func stackLeft(w *Watcher, depth, path int) { distinctStacks(w, depth, path) }

//go:noinline
func stackRight(w *Watcher, depth, path int) { distinctStacks(w, depth, path) }

// With full stacks, a million distinct registration stacks stay within the
// tables' bounds; the registrations are still counted exactly, at their one
// site.
func TestMillionDistinctStacksBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a million registrations")
	}
	depth := millionDepth // 2^20 paths (2^16 under the race detector)
	const maxStacks, maxSites = 2048, 1024
	w := newWatcher(t, WithFullStacks(true), WithMaxStacks(maxStacks), WithMaxSites(maxSites))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for p := range 1 << depth {
		distinctStacks(w, depth, p)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := w.stacks.Len(); n > maxStacks {
		t.Fatalf("stack table holds %d, bound %d", n, maxStacks)
	}
	if n := w.sites.Len(); n > maxSites {
		t.Fatalf("site table holds %d, bound %d", n, maxSites)
	}
	ov := w.overflowNow()
	if ov.Stacks == 0 {
		t.Fatalf("no stack overflow counted: %+v", ov)
	}
	line := testkit.MarkerLine(t, "concurrency_test.go", "distinct-stacks")
	s, ok := siteByLine(w.siteList(), line)
	if !ok || s.Registered != 1<<depth || ov.Sites != 0 {
		t.Fatalf("site registered %d (overflow %d), want %d", s.Registered, ov.Sites, 1<<depth)
	}
	t.Logf("2^%d distinct stacks: %d stacks kept, %d sites, overflow %+v, heap %+d KiB after GC",
		depth, w.stacks.Len(), w.sites.Len(), ov, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024)
	if stackcapture.MaxDepth < depth+3 {
		t.Fatal("MaxDepth too small for this test")
	}
}
