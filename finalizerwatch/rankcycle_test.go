package finalizerwatch

import (
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// TestRankEachCycle checks that RankEachCycle ranks after GC cycles end,
// so that the next Read of the cycle finds the ranking made, and that it
// returns once done is closed.
func TestRankEachCycle(t *testing.T) {
	w := newWatcher(t)
	o := new(snapObj)
	snapSiteA(w, o)
	defer w.SetFinalizer(o, nil)

	ranked := make(chan struct{}, 1)
	w.rankMu.Lock()
	w.rank.ranked = func() {
		select {
		case ranked <- struct{}{}:
		default:
		}
	}
	w.rankMu.Unlock()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		w.RankEachCycle(done)
	}()

	// Drive GC cycles until the loop has ranked.
	testkit.AwaitGC(t, 20*time.Second, "RankEachCycle to rank", func() bool {
		select {
		case <-ranked:
			return true
		default:
			return false
		}
	})
	// Stop the loop first, so that only the Read below can rank.
	close(done)
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("RankEachCycle did not return after done was closed")
	}
	// A cycle whose end the clock counts only now (the finalizer
	// goroutine, which ticks it, may lag behind runtime.GC on a busy
	// machine) makes the ranking out of date: Read may then rank, rightly.
	clock := func() (c [numKinds]uint32) {
		for k := range c {
			c[k] = w.cycles[k].Load()
		}
		return c
	}
	w.rankMu.Lock()
	pass, cycles := w.rank.pass, w.rank.cycles
	before := clock() // before rankCurrent reads it: a later tick shows in after
	current := w.rankCurrent(1)
	w.rankMu.Unlock()
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 1})
	after := clock()
	w.rankMu.Lock()
	again := w.rank.pass != pass
	w.rankMu.Unlock()
	if current && again && before == after {
		t.Errorf("Read ranked again although the loop's ranking (cycles %v) was current", cycles)
	}
	if top := sn.Kinds[KindFinalizer].Top; len(top) != 1 || top[0].Registered != 1 {
		t.Errorf("top %+v: want the one site with one registration", top)
	}
}

// TestRankIfStale checks that the loop's ranking ranks only when the
// ranking is out of date, for the K of the cached reads.
func TestRankIfStale(t *testing.T) {
	w := newWatcher(t)
	o := new(snapObj)
	snapSiteA(w, o)
	defer w.SetFinalizer(o, nil)
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 3})
	pass := w.rank.pass
	w.rankIfStale()
	if w.rank.pass != pass && w.rankCurrent(3) {
		t.Fatalf("ranked although the ranking was current")
	}
	// A fresh read of every site does not raise the K the loop ranks for.
	w.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	w.rankIfStale()
	if w.rank.k != 3 {
		t.Errorf("after a fresh read of every site the loop ranked for K=%d, want 3", w.rank.k)
	}
	if !w.rank.valid {
		t.Errorf("the loop left the ranking invalid after a fresh read")
	}
}

// BenchmarkRankCycle is the once-per-GC-cycle ranking of 10 000 ledger
// entries (two sites, 5 000 registration stacks into each, full stacks
// on): the work RankEachCycle moves off the scrape path. Each iteration
// starts a GC cycle of both kinds on the watcher's clock, as the clock's
// ticks do, and ranks. Read is the scrape's part once the ranking is made.
func BenchmarkRankCycle(b *testing.B) {
	const n = 10000
	w := newWatcher(b, WithFullStacks(true), WithMaxSites(2*n), WithMaxStacks(2*n))
	kept := make([]*snapObj, 0, n)
	defer func() {
		for _, o := range kept {
			w.SetFinalizer(o, nil)
		}
	}()
	for path := range uint(n) {
		testkit.AtPath(path/2, 13, func() {
			o := new(snapObj)
			if path%2 == 0 {
				snapSiteA(w, o)
			} else {
				snapSiteB(w, o)
			}
			kept = append(kept, o)
		})
	}
	if got := w.sites.Len(); got < n {
		b.Fatalf("%d ledger entries, want %d", got, n)
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 10})
	b.Run("Rank", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for k := range w.cycles {
				w.cycles[k].Add(1)
			}
			w.rankIfStale()
		}
	})
	b.Run("Read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.rankIfStale() // in case a real GC cycle ended: ranked off the clock
			w.Read(&sn, ReadOptions{TopK: 10})
		}
	})
}

// TestFreshReadTrimsTops checks that a fresh read of many sites does not
// leave the ranking holding sums for all of them: the ranking's slice is
// grown as a fresh read of a large ledger would grow it.
func TestFreshReadTrimsTops(t *testing.T) {
	w := newWatcher(t)
	regs := []func(*snapObj){
		func(o *snapObj) { w.SetFinalizer(o, func(*snapObj) {}) },
		func(o *snapObj) { w.SetFinalizer(o, func(*snapObj) {}) },
		func(o *snapObj) { w.SetFinalizer(o, func(*snapObj) {}) },
	}
	var kept []*snapObj
	defer func() {
		for _, o := range kept {
			w.SetFinalizer(o, nil)
		}
	}()
	for _, reg := range regs {
		o := new(snapObj)
		reg(o)
		kept = append(kept, o)
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 1})
	w.rankMu.Lock()
	w.rank.tops[KindFinalizer] = make([]topSums, 0, 10000)
	w.rankMu.Unlock()
	w.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	if n := len(sn.Kinds[KindFinalizer].Top); n != len(regs) {
		t.Fatalf("fresh read of every site: %d sites, want %d", n, len(regs))
	}
	if c := cap(w.rank.tops[KindFinalizer]); c > 2*w.rank.k+16 {
		t.Errorf("after a fresh read the ranking keeps sums for %d sites (K=%d)", c, w.rank.k)
	}
}
