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
	rec := func() *rtIndRec { // a record of the line's, of the current generation
		for i := range rtInd[KindFinalizer] {
			if r := rtInd[KindFinalizer][i].Load(); r != nil && r.gen == stackcapture.OriginGeneration() &&
				r.c.s.siteFrame().Function == "github.com/gcprobe/probe/finalizerwatch.rtOpOpenCloseRec" {
				return r
			}
		}
		return nil
	}
	checkFirst := func(t *testing.T) {
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
	}
	// One line calls the op, at two depths (called from two lines, a
	// function that opens a file is a helper to the ledger: callers.go).
	// A record is chosen by the first eight frames of the walk, the
	// test's own lines among them: every open below runs from the same
	// lines (run's, called by one line).
	do := func() { rtOpOpenCloseRec(&tr) }
	run := func(n int) {
		for i := range n {
			if i%2 == 0 {
				do()
			} else {
				atDepth(24, do)
			}
		}
	}
	var walked uint64
	var cyc uint32
	for _, n := range []int{50, 20, 1} {
		switch n {
		case 20:
			// Served by the records: the opens walk no more, but for
			// an entry's first registration in a GC cycle, which folds
			// its ring (rtRegister).
			walked, cyc = rtIndWalked.Load(), Default.cycles[KindFinalizer].Load()
		case 1:
			if n, cycles := rtIndWalked.Load()-walked, uint64(Default.cycles[KindFinalizer].Load()-cyc); n > cycles {
				t.Errorf("%d of 20 opens at a line with records walked and classified their frames, in %d GC cycles", n, cycles)
			}
			// A change of the look-through set (a name that matches
			// nothing) makes the records stale: the next open walks and
			// records anew.
			if !stackcapture.LookThrough("github.com/gcprobe/probe/finalizerwatch.noSuchHelperForTest") {
				t.Fatal("LookThrough added nothing")
			}
			walked = rtIndWalked.Load()
		}
		run(n)
		if n == 50 {
			checkFirst(t)
		}
	}
	if rtIndWalked.Load() == walked {
		t.Error("after the look-through set changed, an open was served by a record of the generation before")
	}
	if r2 := rec(); r2 == nil || r2.gen != stackcapture.OriginGeneration() {
		t.Errorf("after the look-through set changed and an open, no record of the new generation %d", stackcapture.OriginGeneration())
	}
	if s := rtSites()["rtOpOpenCloseRec"]; s.Registered != 71 || s.Cleared != 71 {
		t.Errorf("rtOpOpenCloseRec: %+v, want 71 registered and cleared", s.Counts)
	}
}

// rtOpOpenCloseRec, Rec2 and Rec3 are rtOpOpenClose's body three times on
// purpose: each os.Open line must be a site of its own, in a function the
// ledger does not look through (one whose body is a one-line call of a
// shared helper is, callers.go, and its opens move to its callers).
//
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

//go:noinline
func rtOpOpenCloseRec2(tr *rtTruth) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		panic(err)
	}
	tr.registered.Add(1)
	f.Close()
	tr.cleared.Add(1)
}

//go:noinline
func rtOpOpenCloseRec3(tr *rtTruth) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		panic(err)
	}
	tr.registered.Add(1)
	f.Close()
	tr.cleared.Add(1)
}

// TestRuntimeModeIndirectRecordsPerLine opens files at two lines in turn:
// both reach os.newFile's one PC, and each line keeps a record of its own,
// the same record from the first opens on (were records chosen by the PC
// alone, the lines would take turns in its slot, each turn allocating a
// record, as a file server's stat and open lines did).
func TestRuntimeModeIndirectRecordsPerLine(t *testing.T) {
	attachDefault(t)
	var tr1, tr2 rtTruth
	do1 := func() { rtOpOpenCloseRec2(&tr1) }
	do2 := func() { rtOpOpenCloseRec3(&tr2) }
	records := func() map[string]*rtIndRec {
		out := map[string]*rtIndRec{}
		for i := range rtInd[KindFinalizer] {
			if r := rtInd[KindFinalizer][i].Load(); r != nil {
				out[r.c.s.siteFrame().Function] = r
			}
		}
		return out
	}
	both := func() { do1(); do2() }
	const fn1, fn2 = "github.com/gcprobe/probe/finalizerwatch.rtOpOpenCloseRec2", "github.com/gcprobe/probe/finalizerwatch.rtOpOpenCloseRec3"
	var first map[string]*rtIndRec
	var walked uint64
	var cyc uint32
	for i := range 103 {
		both()
		if i == 2 {
			if first = records(); first[fn1] == nil || first[fn2] == nil {
				t.Fatalf("records after a few opens at each line: %v, want one for each", first)
			}
			walked, cyc = rtIndWalked.Load(), Default.cycles[KindFinalizer].Load()
		}
	}
	if now := records(); now[fn1] != first[fn1] || now[fn2] != first[fn2] {
		t.Errorf("the lines' records were replaced while they opened in turn: the same slot, taken in turns")
	}
	if n, cycles := rtIndWalked.Load()-walked, uint64(Default.cycles[KindFinalizer].Load()-cyc); n > 2*cycles {
		t.Errorf("%d of 200 opens at two lines with records walked and classified their frames, in %d GC cycles", n, cycles)
	}
}
