package finalizerwatch

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// clockBase is the origin of the times recorded for running callbacks.
var clockBase = time.Now()

// monoNow reads the monotonic clock, in nanoseconds since clockBase. It is
// time.Since, which reads only the monotonic clock, where time.Now reads
// the wall clock too: one clock read instead of two.
func monoNow() int64 { return int64(time.Since(clockBase)) }

// DurationSampleRate is how many callback runs, on average, make one that
// is timed: one in DurationSampleRate goes into its site's run-time
// histogram (SiteStats.Duration), whose counts and sum are scaled back by
// the rate when read. So the histogram is an unbiased estimate, its counts
// multiples of the rate, while Executed stays exact. Reading the clock
// when a callback returns costs about as much as the rest of the run's
// accounting together; the start of every run is still read, for Running.
//
// Which runs are timed is drawn at random, from the runtime's per-thread
// generator (cheaprand, see sample.go: a nanosecond): the draw does not
// depend on how long the run takes, so the timed runs are a fair sample of
// the run times. (Hashing the start time instead, which was cheaper than
// math/rand, timed 64 % of the expected runs of a backlog drained back to
// back: starts at a near-steady pace form a Weyl sequence whose step can
// sit close to a fraction with a small denominator.)
const DurationSampleRate = 1 << durationSampleBits

const durationSampleBits = 3

// timed reports whether a run goes into the run-time histogram: one in
// DurationSampleRate, at random.
func timed() bool { return cheaprand()>>(32-durationSampleBits) == 0 }

// Callbacks running now are recorded in a few slots per watcher and kind,
// not on their sites, so that Running reads a handful of words however many
// sites the ledger has (it is read on every scrape). The runtime runs
// finalizers on one goroutine, and cleanups on at most GOMAXPROCS/4
// (runtime/mcleanup.go, maxCleanupGs); a callback that finds every slot of
// its kind taken is not recorded.
//
// A slot is one word, claimed with a compare-and-swap and released with a
// store: the callback's start, in milliseconds since clockBase plus one,
// above the running site's id (site.runID) in the low runIDBits. Each slot
// has a cache line of its own, as concurrent cleanups claim neighbours.
const (
	runIDBits       = 22 // ids up to MaxSitesLimit, with room to spare
	runIDMask       = 1<<runIDBits - 1
	finalizerSlots  = 1
	cleanupSlots    = 16
	runSlotsPerKind = cleanupSlots
)

type runSlot struct {
	w atomic.Uint64
	_ [56]byte
}

// runSlots are a watcher's slots for running callbacks, and the registry
// that turns a slot's site id back into its site.
type runSlots struct {
	slots [numKinds][runSlotsPerKind]runSlot

	mu    sync.Mutex                                         // guards the chunks' contents and next
	next  uint32                                             // last id given out
	chunk []atomic.Pointer[[runIDChunk]atomic.Pointer[site]] // made by init, for the site table's bound
}

// init sizes the registry for a site table of at most maxSites entries
// (and the few more that racing inserts may add, and the overflow sites).
func (r *runSlots) init(maxSites int) {
	r.chunk = make([]atomic.Pointer[[runIDChunk]atomic.Pointer[site]], (maxSites+runIDChunk)/runIDChunk+1)
}

const runIDChunk = 1024

// runID returns s's id in w's running-callback registry, giving it one on
// its first run.
func (w *Watcher) runID(s *site) uint32 {
	if id := s.runID.Load(); id != 0 {
		return id
	}
	r := &w.running
	r.mu.Lock()
	defer r.mu.Unlock()
	if id := s.runID.Load(); id != 0 {
		return id
	}
	if int(r.next+1)/runIDChunk >= len(r.chunk) {
		return 0 // not recorded: more sites than the table's bound allows for
	}
	r.next++
	id := r.next
	c := r.chunk[id/runIDChunk].Load()
	if c == nil {
		c = new([runIDChunk]atomic.Pointer[site])
		r.chunk[id/runIDChunk].Store(c)
	}
	c[id%runIDChunk].Store(s)
	s.runID.Store(id)
	return id
}

// lookup returns the site whose id is id, or nil: two atomic loads, for
// the runtime build mode's callbacks and Running.
func (r *runSlots) lookup(id uint32) *site {
	if id == 0 || int(id/runIDChunk) >= len(r.chunk) {
		return nil
	}
	if c := r.chunk[id/runIDChunk].Load(); c != nil {
		return c[id%runIDChunk].Load()
	}
	return nil
}

// begin records that a callback of kind k (s.kind, which the callback
// knows: see site) at s started at start (monoNow). It returns the slot
// end releases, or nil if none was free.
func (w *Watcher) begin(k Kind, s *site, start int64) *atomic.Uint64 {
	id := w.runID(s)
	if id == 0 {
		return nil
	}
	word := uint64(start/int64(time.Millisecond)+1)<<runIDBits | uint64(id)
	n := cleanupSlots
	if k == KindFinalizer {
		n = finalizerSlots
	}
	slots := &w.running.slots[k]
	for i := range n {
		if slots[i].w.CompareAndSwap(0, word) {
			return &slots[i].w
		}
	}
	return nil
}

// end records that the callback begin returned slot for has returned.
func end(slot *atomic.Uint64) {
	if slot != nil {
		slot.Store(0)
	}
}

// RunningCallback is a finalizer or cleanup registered through the watcher
// that is running now.
type RunningCallback struct {
	Kind Kind
	Site stackcapture.Frame
	// For is how long it has been running, to the millisecond. A finalizer
	// that runs for long holds up every finalizer queued behind it: the
	// runtime runs them one at a time, on one goroutine.
	For time.Duration
}

// appendRunning appends the callbacks running now to out (see Running).
func (w *Watcher) appendRunning(out []RunningCallback) []RunningCallback {
	now := monoNow()
	n := len(out)
	for k := range w.running.slots {
		for i := range w.running.slots[k] {
			word := w.running.slots[k][i].w.Load()
			if word == 0 {
				continue
			}
			s := w.running.lookup(uint32(word & runIDMask))
			if s == nil {
				continue
			}
			start := int64(word>>runIDBits-1) * int64(time.Millisecond)
			rc := RunningCallback{Kind: s.kind, Site: s.siteFrame(), For: time.Duration(max(0, now-start))}
			if j := slices.IndexFunc(out[n:], func(o RunningCallback) bool { return o.Kind == rc.Kind && o.Site == rc.Site }); j >= 0 {
				out[n+j].For = max(out[n+j].For, rc.For)
				continue
			}
			out = append(out, rc)
		}
	}
	slices.SortFunc(out[n:], func(a, b RunningCallback) int { return cmp.Compare(b.For, a.For) })
	return out
}
