package finalizerwatch

import "testing"

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
	if w.rank.pass != pass && w.Cycles(KindFinalizer) == uint64(w.rank.cycles[KindFinalizer]) {
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
