package finalizerwatch

import (
	"os"
	"testing"

	"github.com/gcprobe/probe/stackcapture"
)

// TestRuntimeModeIndirectRecord checks that a file opened again at a line
// the ledger knows is counted through the line's record (rtInd), at that
// line, as the walk would count it, from any depth below it; and that a
// record made before a change of the look-through set is not used after.
func TestRuntimeModeIndirectRecord(t *testing.T) {
	attachDefault(t)
	var tr rtTruth
	// One line calls the op, at two depths (called from two lines, a
	// function that opens a file is a helper to the ledger: callers.go).
	do := func() { rtOpOpenCloseRec(&tr) }
	for i := range 50 {
		if i%2 == 0 {
			do()
		} else {
			atDepth(24, do)
		}
	}
	rec := func() *rtIndRec {
		for i := range rtInd[KindFinalizer] {
			if r := rtInd[KindFinalizer][i].Load(); r != nil && r.c.s.siteFrame().Function == "github.com/gcprobe/probe/finalizerwatch.rtOpOpenCloseRec" {
				return r
			}
		}
		return nil
	}
	r := rec()
	if r == nil {
		t.Fatal("no record of rtOpOpenCloseRec's os.Open: every open walked and classified its stack")
	}
	if g := stackcapture.OriginGeneration(); r.gen != g {
		t.Fatalf("record of generation %d, the look-through set's is %d", r.gen, g)
	}
	if s := rtSites()["rtOpOpenCloseRec"]; s.Registered != 50 || s.Outstanding != 0 || s.Cleared != 50 {
		t.Errorf("rtOpOpenCloseRec: %+v, want 50 registered and cleared", s.Counts)
	}

	// A change of the look-through set (a name that matches nothing)
	// makes the record stale: the next open walks and records anew.
	if !stackcapture.LookThrough("github.com/gcprobe/probe/finalizerwatch.noSuchHelperForTest") {
		t.Fatal("LookThrough added nothing")
	}
	do()
	if r2 := rec(); r2 == nil || r2 == r || r2.gen != stackcapture.OriginGeneration() {
		t.Errorf("after the look-through set changed, the record is %p (was %p), of generation %d; want a new one of %d", r2, r, r2.gen, stackcapture.OriginGeneration())
	}
	if s := rtSites()["rtOpOpenCloseRec"]; s.Registered != 51 || s.Cleared != 51 {
		t.Errorf("rtOpOpenCloseRec: %+v, want 51 registered and cleared", s.Counts)
	}
}

//go:noinline
func rtOpOpenCloseRec(tr *rtTruth) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		panic(err)
	}
	tr.registered.Add(1)
	f.Close()
	tr.cleared.Add(1)
}
