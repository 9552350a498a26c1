package probe

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

// cycleSnap is a ledger snapshot of k top sites, as the per-cycle read
// fills it.
func cycleSnap(k int) *finalizerwatch.Snapshot {
	var sn finalizerwatch.Snapshot
	for i := range k {
		sn.Top = append(sn.Top, finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer,
			Site: stackcapture.Frame{Function: "main.f", File: "/src/main.go", Line: i + 1}, Suspect: uint64(i), Class: finalizerwatch.ClassStable})
	}
	sn.Kinds[finalizerwatch.KindFinalizer].Top = sn.Top
	return &sn
}

// TestHistoryRingBounded: the history keeps the last PageHistoryCycles
// rows, oldest first, one row per cycle PageHistoryStep apart (a second
// read of a cycle updates its row; the cycles of one step share a row,
// the last one's), and the last PageEvents events.
func TestHistoryRingBounded(t *testing.T) {
	h := newHistory()
	sn := cycleSnap(3)
	ms := memstats.Snapshot{Samples: 1, Time: time.Unix(1000, 0)}
	h.record(sn, &ms) // cycle 0: the sampler has seen none yet
	for c := uint64(1); c <= 3*PageHistoryCycles; c++ {
		ms.Time = ms.Time.Add(PageHistoryStep)
		for _, fast := range []uint64{100, 10} { // two cycles a few ms before c, in its step
			ms.Cycles, ms.HeapLive = c*1000-fast, 1
			h.record(sn, &ms)
			ms.Time = ms.Time.Add(time.Millisecond)
		}
		ms.Cycles, ms.HeapLive = c*1000, c*1000
		h.record(sn, &ms)
		ms.HeapLive = c * 10000
		h.record(sn, &ms) // the same cycle again: the row is updated
	}
	var got []uint64
	h.eachRow(func(r *cycleRow) {
		got = append(got, r.cycle)
		if r.heapLive != r.cycle*10 || len(r.sites) != 3 || r.cycle%1000 != 0 {
			t.Fatalf("row %d: heap %d, %d sites", r.cycle, r.heapLive, len(r.sites))
		}
	})
	if len(got) != PageHistoryCycles || got[0] != 1000*(2*PageHistoryCycles+1) || got[len(got)-1] != 1000*3*PageHistoryCycles {
		t.Fatalf("rows %d..%d (%d), want the last %d cycles", got[0], got[len(got)-1], len(got), PageHistoryCycles)
	}
	for i := range 3 * PageEvents {
		h.event(memstats.Event{Detector: "d", Value: float64(i)})
	}
	var vals []float64
	h.eachEvent(func(e *memstats.Event) { vals = append(vals, e.Value) })
	if len(vals) != PageEvents || vals[0] != 2*PageEvents || vals[len(vals)-1] != 3*PageEvents-1 {
		t.Fatalf("events %v, want the last %d", vals, PageEvents)
	}
}

// TestPerCycleWorkAllocatesNothing: once the rings are full, what the
// probe does with each cycle's read (the growing-site log's check and the
// history's record) allocates nothing.
func TestPerCycleWorkAllocatesNothing(t *testing.T) {
	h := newHistory()
	g := newGrowingLog(GrowingLogEvery)
	l := slog.New(slog.DiscardHandler)
	sn := cycleSnap(10)
	ms := memstats.Snapshot{Samples: 1}
	now := time.Unix(0, 0)
	for c := uint64(1); c <= PageHistoryCycles+1; c++ {
		ms.Cycles = c
		h.record(sn, &ms)
		g.check(l, sn, now)
	}
	allocs := testing.AllocsPerRun(100, func() {
		ms.Cycles++
		h.record(sn, &ms)
		g.check(l, sn, now)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per cycle, want 0", allocs)
	}
}
