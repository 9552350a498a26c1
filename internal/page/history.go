package page

import (
	"sync"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/sitekey"
	"github.com/gcprobe/probe/memstats"
)

// The live page's history lives in the probe, not in the browser, so that
// a reload keeps it: a ring of the last HistoryCycles rows, each one
// GC cycle or the cycles of HistoryStep, with the heap, the GC's CPU share, both queues and the suspects of that
// cycle's top sites, and a ring of the last HistoryEvents detector events.
// The per-cycle loop (cycles.go) records a cycle after each of its reads;
// the page's JSON (page.go) copies the rings under the lock. Memory is
// fixed once the rings are full: HistoryCycles rows of at most
// WithTopK sites each, whose strings are the ledger's own
// (symbolized once per stack), so recording allocates nothing in the
// steady state.

const (
	// HistoryCycles is probe.PageHistoryCycles: the rows kept.
	HistoryCycles = 120
	// HistoryStep is probe.PageHistoryStep: the least time a row stands
	// for.
	HistoryStep = 2 * time.Second
	// HistoryEvents is probe.PageEvents: the detector events kept.
	HistoryEvents = 64
)

// cycleRow is one GC cycle of the history.
type cycleRow struct {
	cycle    uint64 // the runtime's GC count (memstats.Snapshot.Cycles)
	time     time.Time
	began    time.Time // the time of the row's first cycle
	heapLive uint64
	heapGoal uint64
	gcCPU    float64
	queues   [2]queueRow // finalizer, cleanup
	sites    []siteRow   // the top sites at this cycle
}

type queueRow struct {
	length  uint64
	drain   float64 // per second
	latency time.Duration
}

// siteRow is one top site's suspect count at one cycle.
type siteRow struct {
	key     sitekey.Key
	suspect uint64
}

// History is the probe's memory for the live page. Its methods are safe
// for concurrent use.
type History struct {
	mu     sync.Mutex
	rows   []cycleRow // ring, len HistoryCycles once full
	next   int        // index the next row goes to, once full
	events []memstats.Event
	nextEv int
}

// NewHistory returns an empty history, its rings allocated.
func NewHistory() *History {
	return &History{rows: make([]cycleRow, 0, HistoryCycles), events: make([]memstats.Event, 0, HistoryEvents)}
}

// Record notes the cycle that ms describes, with the top sites of sn: a
// new row if the runtime's GC count moved since the last row and the last
// row began at least HistoryStep ago, else an update of the last row
// (a later read of the same cycle knows more; a later cycle of the same
// step stands for it).
func (h *History) Record(sn *finalizerwatch.Snapshot, ms *memstats.Snapshot) {
	if ms.Samples == 0 || ms.Cycles == 0 {
		return // the sampler has not read the runtime yet
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var row *cycleRow
	switch last := h.lastLocked(); {
	case last != nil && (last.cycle == ms.Cycles || ms.Time.Sub(last.began) < HistoryStep):
		row = last
	case len(h.rows) < cap(h.rows):
		h.rows = append(h.rows, cycleRow{})
		row = &h.rows[len(h.rows)-1]
		row.began = ms.Time
	default:
		row = &h.rows[h.next]
		h.next = (h.next + 1) % len(h.rows)
		row.began = ms.Time
	}
	row.cycle, row.time = ms.Cycles, ms.Time
	row.heapLive, row.heapGoal, row.gcCPU = ms.HeapLive, ms.HeapGoal, ms.GCCPUFraction
	for i, q := range [2]*memstats.Queue{&ms.Finalizers, &ms.Cleanups} {
		row.queues[i] = queueRow{length: q.Length, drain: q.DrainPerSecond, latency: q.Latency}
	}
	row.sites = row.sites[:0]
	for i := range sn.Top {
		row.sites = append(row.sites, siteRow{key: sitekey.Of(&sn.Top[i]), suspect: sn.Top[i].Suspect})
	}
}

// lastLocked returns the newest row, nil if none.
func (h *History) lastLocked() *cycleRow {
	switch {
	case len(h.rows) == 0:
		return nil
	case len(h.rows) < cap(h.rows):
		return &h.rows[len(h.rows)-1]
	}
	return &h.rows[(h.next+len(h.rows)-1)%len(h.rows)]
}

// Event notes a detector event. It runs on the sampler's goroutine
// (memstats.Sampler.Subscribe): a copy into the ring under the lock.
func (h *History) Event(e memstats.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) < cap(h.events) {
		h.events = append(h.events, e)
		return
	}
	h.events[h.nextEv] = e
	h.nextEv = (h.nextEv + 1) % len(h.events)
}

// eachRow calls fn with each row, oldest first, under the lock: fn must
// not keep the row's sites.
func (h *History) eachRow(fn func(*cycleRow)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	eachInRing(h.rows, h.next, fn)
}

// eachEvent calls fn with each event kept, oldest first, under the lock.
func (h *History) eachEvent(fn func(*memstats.Event)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	eachInRing(h.events, h.nextEv, fn)
}

// eachInRing calls fn with each element of ring, oldest first: a ring is
// filled by append up to its capacity, then overwritten from next on.
func eachInRing[T any](ring []T, next int, fn func(*T)) {
	start := 0
	if len(ring) == cap(ring) {
		start = next
	}
	for i := range ring {
		fn(&ring[(start+i)%len(ring)])
	}
}

// FirstCycle is the GC cycle of the oldest row kept, 0 for none: the
// cycle from which a document's pauses are read.
func (h *History) FirstCycle() uint64 {
	var first uint64
	h.eachRow(func(c *cycleRow) {
		if first == 0 {
			first = c.cycle
		}
	})
	return first
}
