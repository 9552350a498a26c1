package finalizerwatch

import (
	"runtime"
	"strings"
	"sync"
	"testing"
)

//go:noinline
func rtOpKeep() *rtObj {
	o := new(rtObj)
	runtime.SetFinalizer(o, func(*rtObj) {})
	return o
}

//go:noinline
func rtOpKeepCleanup() runtime.Cleanup {
	o := new(rtObj)
	c := runtime.AddCleanup(o, func(int) {}, 0)
	rtKept = append(rtKept, o)
	return c
}

var rtKept []*rtObj

// rtRawCounts reads the entry of the function named fn as the ledger
// holds it, without moving the counts on the P first (what Read does).
func rtRawCounts(fn string) (c Counts, ok bool) {
	Default.sites.Range(func(_ siteKey, s *site) bool {
		if !s.indirect && strings.HasSuffix(s.siteFrame().Function, "."+fn) {
			c, ok = s.counts(), true
			return false
		}
		return true
	})
	return c, ok
}

// TestRuntimeModeCountsOnP checks the counts the patched runtime keeps on
// the P (rtpcounts.go) against what the test did. Objects registered in
// 40 GC cycles are cleared later from eight goroutines, so that the
// clears' tokens (one per registration cycle) outnumber a P's table and
// some are counted by the hooks at once; eight Ps hold counts, and seven
// of them are retired (GOMAXPROCS 1) before the read. The read must
// count every registration and clear exactly once, and age the objects
// left outstanding by their registration cycle; before it, the ledger's
// entries must lack counts that are still on the Ps.
func TestRuntimeModeCountsOnP(t *testing.T) {
	attachDefault(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	rtKept = nil
	defer func() { rtKept = nil }()

	const cycles, perCycle = 40, 50
	objs := make([][]*rtObj, cycles)
	stops := make([][]runtime.Cleanup, cycles)
	for c := range cycles {
		for range perCycle {
			objs[c] = append(objs[c], rtOpKeep())
			stops[c] = append(stops[c], rtOpKeepCleanup())
		}
		runtime.GC()
	}
	// The first cycle's objects stay; the others' are cleared and
	// stopped, spread over goroutines.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for c := 1 + g; c < cycles; c += 8 {
				for i, o := range objs[c] {
					runtime.SetFinalizer(o, nil)
					stops[c][i].Stop()
				}
			}
		})
	}
	wg.Wait()

	wantReg, wantEnds := uint64(cycles*perCycle), uint64((cycles-1)*perCycle)
	for _, fn := range []string{"rtOpKeep", "rtOpKeepCleanup"} {
		raw, ok := rtRawCounts(fn)
		if !ok {
			t.Fatalf("%s: no entry", fn)
		}
		if raw.Registered+raw.Cleared >= wantReg+wantEnds {
			t.Errorf("%s: before the read the entry already holds every count (%+v): nothing was counted on the P", fn, raw)
		}
	}

	runtime.GOMAXPROCS(1)
	sites := rtSites()
	for _, fn := range []string{"rtOpKeep", "rtOpKeepCleanup"} {
		s := sites[fn]
		if s.Registered != wantReg || s.Cleared != wantEnds || s.Executed != 0 || s.Outstanding != perCycle {
			t.Errorf("%s: registered %d cleared %d executed %d outstanding %d; want %d, %d, 0, %d",
				fn, s.Registered, s.Cleared, s.Executed, s.Outstanding, wantReg, wantEnds, perCycle)
		}
		// The ones left were registered 39 GC cycles ago and more: all in
		// the oldest bucket.
		if got := s.Survived[AgeBuckets-1]; got != perCycle {
			t.Errorf("%s: %d outstanding in the oldest age bucket, want %d (%v)", fn, got, perCycle, s.Survived)
		}
	}
	runtime.KeepAlive(objs)
	runtime.KeepAlive(rtKept)
}
