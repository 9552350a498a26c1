package page

import (
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

// TestHistoryRingBounded: the history keeps the last HistoryCycles
// rows, oldest first, one row per cycle HistoryStep apart (a second
// read of a cycle updates its row; the cycles of one step share a row,
// the last one's), and the last HistoryEvents events.
func TestHistoryRingBounded(t *testing.T) {
	h := NewHistory()
	sn := cycleSnap(3)
	ms := memstats.Snapshot{Samples: 1, Time: time.Unix(1000, 0)}
	h.Record(sn, &ms) // cycle 0: the sampler has seen none yet
	for c := uint64(1); c <= 3*HistoryCycles; c++ {
		ms.Time = ms.Time.Add(HistoryStep)
		for _, fast := range []uint64{100, 10} { // two cycles a few ms before c, in its step
			ms.Cycles, ms.HeapLive = c*1000-fast, 1
			h.Record(sn, &ms)
			ms.Time = ms.Time.Add(time.Millisecond)
		}
		ms.Cycles, ms.HeapLive = c*1000, c*1000
		h.Record(sn, &ms)
		ms.HeapLive = c * 10000
		h.Record(sn, &ms) // the same cycle again: the row is updated
	}
	var got []uint64
	h.eachRow(func(r *cycleRow) {
		got = append(got, r.cycle)
		if r.heapLive != r.cycle*10 || len(r.sites) != 3 || r.cycle%1000 != 0 {
			t.Fatalf("row %d: heap %d, %d sites", r.cycle, r.heapLive, len(r.sites))
		}
	})
	if len(got) != HistoryCycles || got[0] != 1000*(2*HistoryCycles+1) || got[len(got)-1] != 1000*3*HistoryCycles {
		t.Fatalf("rows %d..%d (%d), want the last %d cycles", got[0], got[len(got)-1], len(got), HistoryCycles)
	}
	for i := range 3 * HistoryEvents {
		h.Event(memstats.Event{Detector: "d", Value: float64(i)})
	}
	var vals []float64
	h.eachEvent(func(e *memstats.Event) { vals = append(vals, e.Value) })
	if len(vals) != HistoryEvents || vals[0] != 2*HistoryEvents || vals[len(vals)-1] != 3*HistoryEvents-1 {
		t.Fatalf("events %v, want the last %d", vals, HistoryEvents)
	}
}

// TestRecordAllocatesNothing: once the rings are full, the history's
// record of each cycle's read allocates nothing (the growing-site log's
// check, the loop's other work, is checked in internal/logs).
func TestRecordAllocatesNothing(t *testing.T) {
	h := NewHistory()
	sn := cycleSnap(10)
	ms := memstats.Snapshot{Samples: 1}
	for c := uint64(1); c <= HistoryCycles+1; c++ {
		ms.Cycles = c
		h.Record(sn, &ms)
	}
	allocs := testing.AllocsPerRun(100, func() {
		ms.Cycles++
		h.Record(sn, &ms)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per cycle, want 0", allocs)
	}
}
