package finalizerwatch

import (
	"runtime"
	"testing"

	"github.com/gcprobe/probe/internal/testkit"
)

type snapObj struct{ _ [16]byte }

// TestReadRanksOncePerCycle checks that a Read in the cycle of the
// ranking reads the top K live without ranking again, that a new ledger
// entry makes the next Read rank, and that the counts add up.
func TestReadRanksOncePerCycle(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var kept []*snapObj
	reg := func(o *snapObj) { snapSiteA(w, o) }
	regB := func(o *snapObj) { snapSiteB(w, o) }
	for range 3 {
		o := new(snapObj)
		reg(o)
		kept = append(kept, o)
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 1})
	pass := w.rank.pass
	ks := &sn.Kinds[KindFinalizer]
	if len(ks.Top) != 1 || ks.Top[0].Registered != 3 || ks.Registered != 3 {
		t.Fatalf("top %+v, totals %+v: want one site with 3 registrations", ks.Top, ks.Totals)
	}
	// More at the top site, same cycle: read live, no ranking.
	o := new(snapObj)
	reg(o)
	kept = append(kept, o)
	w.Read(&sn, ReadOptions{TopK: 1})
	if w.rank.pass != pass && w.cycleCount(KindFinalizer) == uint64(w.rank.cycles[KindFinalizer]) {
		t.Errorf("Read ranked again in the same cycle with the same entries")
	}
	if got := sn.Kinds[KindFinalizer].Top[0].Registered; got != 4 {
		t.Errorf("top site's registrations read %d, want 4 (live)", got)
	}
	// A new site: the next Read ranks, and it lands under Other.
	o = new(snapObj)
	regB(o)
	kept = append(kept, o)
	w.Read(&sn, ReadOptions{TopK: 1})
	if w.rank.pass == pass {
		t.Errorf("Read did not rank after a new ledger entry")
	}
	ks = &sn.Kinds[KindFinalizer]
	if ks.Ranked != 2 || ks.Other.Registered != 1 || ks.Registered != 5 || ks.Top[0].Registered != 4 {
		t.Errorf("ranked %d, other %d, total %d, top %d: want 2, 1, 5, 4", ks.Ranked, ks.Other.Registered, ks.Registered, ks.Top[0].Registered)
	}
	for _, o := range kept {
		w.SetFinalizer(o, nil)
	}
}

// snapSiteA and snapSiteB are two sites, kept out of line so that each is
// one ledger entry wherever it is called from.
//
//go:noinline
func snapSiteA(w *Watcher, o *snapObj) { w.SetFinalizer(o, func(*snapObj) {}) }

//go:noinline
func snapSiteB(w *Watcher, o *snapObj) { w.SetFinalizer(o, func(*snapObj) {}) }

// TestReadBoundsLiveEntries checks that a Read that does not rank reads
// at most liveEntries entries of a top site live, takes the others from
// the ranking, and that a Fresh read counts them all.
func TestReadBoundsLiveEntries(t *testing.T) {
	const paths = 3 * liveEntries
	w, err := New(WithFullStacks(true))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var kept []*snapObj
	regAll := func() {
		for path := range uint(paths) {
			testkit.AtPath(path, 5, func() {
				o := new(snapObj)
				snapSiteA(w, o)
				kept = append(kept, o)
			})
		}
	}
	defer func() {
		for _, o := range kept {
			w.SetFinalizer(o, nil)
		}
	}()
	var sn Snapshot
	var pass uint32
	var cycles uint64
	// Twice from this one line, so that the second round's stacks are
	// the first's: no new entry.
	for round := range 2 {
		regAll()
		w.Read(&sn, ReadOptions{TopK: 1})
		top := sn.Kinds[KindFinalizer].Top
		if round == 0 {
			if len(top) != 1 || top[0].Registered != paths || top[0].Outstanding != paths {
				t.Fatalf("top %+v: want one site with %d registrations outstanding", top, paths)
			}
			if n := w.sites.Len(); n < paths {
				t.Fatalf("%d ledger entries, want at least %d (one per stack)", n, paths)
			}
			pass, cycles = w.rank.pass, w.cycleCount(KindFinalizer)
			continue
		}
		if w.rank.pass != pass {
			if w.cycleCount(KindFinalizer) == cycles {
				t.Fatalf("Read ranked again in the same cycle with the same entries")
			}
			t.Skip("a GC cycle ended during the test: the Read ranked")
		}
		if got, want := top[0].Registered, uint64(paths+liveEntries); got != want {
			t.Errorf("top site read %d registrations, want %d: %d entries live, the rest as of the ranking", got, want, liveEntries)
		}
	}
	w.Read(&sn, ReadOptions{TopK: 1, Fresh: true})
	if got := sn.Kinds[KindFinalizer].Top[0].Registered; got != 2*paths {
		t.Errorf("fresh read: %d registrations, want %d", got, 2*paths)
	}
	if ks := &sn.Kinds[KindFinalizer]; ks.Registered != 2*paths || ks.Outstanding != 2*paths {
		t.Errorf("fresh totals %+v, want %d registered and outstanding", ks.Totals, 2*paths)
	}
}

// TestReadUnranked checks that an Unranked read does not rank even when
// the ranking is out of date, and still lists every entry.
func TestReadUnranked(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, b := new(snapObj), new(snapObj)
	snapSiteA(w, a)
	defer w.SetFinalizer(a, nil)
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 1})
	pass := w.rank.pass
	snapSiteB(w, b) // a new entry: the ranking is out of date
	defer w.SetFinalizer(b, nil)
	w.Read(&sn, ReadOptions{Entries: true, Unranked: true})
	if w.rank.pass != pass {
		t.Errorf("an Unranked read ranked")
	}
	if len(sn.Entries) != 2 {
		t.Errorf("%d entries, want 2", len(sn.Entries))
	}
	w.Read(&sn, ReadOptions{TopK: 1})
	if w.rank.pass == pass {
		t.Errorf("the next ranked read did not rank after a new entry")
	}
	// After a fresh read of every site there is no ranking to reuse: an
	// Unranked read ranks, and reads what it ranked.
	w.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	w.Read(&sn, ReadOptions{TopK: 1, Entries: true, Unranked: true})
	if ks := &sn.Kinds[KindFinalizer]; len(ks.Top) != 1 || ks.Registered != 2 {
		t.Errorf("unranked read after a fresh one: top %d sites, %d registered; want 1 and 2", len(ks.Top), ks.Registered)
	}
}

// TestRankingMeetsEntriesMadeMeanwhile: registrations go on while the
// ledger is ranked, so an entry can appear between the ranking's two
// passes, without a group. The ranking counts it under the rest rather
// than indexing a group it does not have (a Report in the demo, under
// load, panicked there: index out of range [-1]).
func TestRankingMeetsEntriesMadeMeanwhile(t *testing.T) {
	w := newWatcher(t)
	kept := []*thing{{}, {}}
	w.SetFinalizer(kept[0], func(*thing) {})
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: 1}) // a ranking, so that the next one is a fresh pass
	w.rankMu.Lock()
	w.rank.betweenPasses = func() {
		w.rank.betweenPasses = nil
		w.SetFinalizer(kept[1], func(*thing) {}) // marker: meanwhile
	}
	w.rankMu.Unlock()
	w.Read(&sn, ReadOptions{TopK: 1, Fresh: true})
	if got := sn.Kinds[KindFinalizer].Totals.Registered; got != 2 {
		t.Errorf("totals count %d registrations, want 2 (the one made during the ranking under Other)", got)
	}
	runtime.KeepAlive(kept)
}
