package finalizerwatch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// Kind tells finalizers from cleanups.
type Kind uint8

// The kinds of registration a Watcher tracks.
const (
	KindFinalizer Kind = iota // runtime.SetFinalizer
	KindCleanup               // runtime.AddCleanup
	numKinds
)

// String returns "finalizer" or "cleanup", the value of the kind label.
func (k Kind) String() string {
	switch k {
	case KindFinalizer:
		return "finalizer"
	case KindCleanup:
		return "cleanup"
	}
	return "unknown"
}

// Kinds lists every Kind, for ranging.
var Kinds = [...]Kind{KindFinalizer, KindCleanup}

// siteKey identifies a ledger entry: a call site by its return PC, or, with
// full stacks, a stack by the hash of its PCs (pc 0). Two stacks whose
// hashes collide cannot both have an entry: the one that finds the other's
// PCs under its key is counted at its call site instead (see siteFor).
type siteKey struct {
	kind Kind
	pc   uintptr
	hash uint64
}

// site is one ledger entry. Its counters are updated with atomics on the
// registration and execution paths; everything else is read-side.
//
// A watcher may hold a few thousand entries (MaxSitesLimit: millions), so
// the layout is kept tight: 224 bytes, a 256-byte node with the table's
// key. What not every entry needs is allocated on first use: the run-time
// histogram on the entry's first run, the symbolized site on its first
// read.
//
// The fields are laid out by who writes them, in the node's four cache
// lines (TestSiteLayout), because registrations and callbacks of one site
// run on different cores at once (the finalizer goroutine; a program that
// keeps making and dropping objects): a line that one side writes and the
// other reads moves between the cores on nearly every operation. The first
// line, with the table's hash and key, is the registrations' alone; the
// second is the callbacks' (their counters) and otherwise read-only; the
// age slots, written by both, fill the third; the fourth is read-mostly.
// So the callbacks' side must not read the first line: it is given its
// kind rather than reading s.kind (see done).
type site struct {
	// The registrations' line (with the node's hash and key).
	registered atomic.Uint64
	nextSample atomic.Uint64       // registered count of the next sampled registration (sample.go); 0: to draw
	stack      *stackcapture.Stack // the key (full stacks) or the first registration's stack
	// checked is set once a registration here passed the runtime's own
	// checks of AddCleanup's arguments (see verifyCleanup).
	checked atomic.Bool
	kind    Kind
	// indirect marks the entry of a return PC inside a wrapper (a method
	// value's, reflection's): it counts nothing, and registrations that
	// come through it look further up the stack for their site.
	indirect bool
	// own marks, in the runtime build mode, the entry of a return PC in
	// gcprobe's library code (with indirect): registrations through it
	// are gcprobe's own and not counted by the runtime's hooks.
	own bool
	// res is, in the runtime build mode, the index of the Resource an
	// entry reached through the standard library registered (runtime.go),
	// 0 for none.
	res uint8

	// The callbacks' line: set once, or counted by callbacks and clears.
	w  *Watcher
	pc uintptr
	// frame caches the symbolized site of a site entry (pc != 0) and of
	// the overflow entries; a stack entry's is its stack's, cached there.
	frame atomic.Pointer[stackcapture.Frame]
	dur   lazyHist
	// Read side, under the watcher's rankMu: the next entry of the entry's
	// site group, and that group (index+1 in the ranking's groups, 0
	// before its first ranking).
	next     *site
	grp      int32
	runID    atomic.Uint32 // id in the watcher's running-callback registry (running.go), 0 until its first run
	executed atomic.Uint64
	cleared  atomic.Uint64

	// The age slots' line, then the ring's read-mostly rest.
	ages           ageRing
	clearedOutside atomic.Uint64 // of cleared: found replaced or cleared outside the watcher
}

// done uncounts an outstanding registration of kind k made in cycle cyc,
// now that it ran or was cleared. k is s.kind, which the callbacks' side
// knows without reading the registrations' cache line (see site).
func (s *site) done(k Kind, cyc uint32) {
	s.ages.remove(cyc, s.w.cycles[k].Load())
}

// overflowFrame is the site of the overflow entries.
var overflowFrame = stackcapture.Frame{Function: "gcprobe.overflow", File: "(site table full)"}

// siteFrame returns the entry's symbolized site, symbolizing it on the
// first call.
func (s *site) siteFrame() stackcapture.Frame {
	if s.pc == 0 && s.stack != nil {
		return s.stack.Site()
	}
	if f := s.frame.Load(); f != nil {
		return *f
	}
	fp := &overflowFrame
	if s.pc != 0 {
		// The first user frame of the PC's expansion (the innermost where
		// the user called finalizerwatch; the user's line where a
		// standard-library call the runtime build mode counts was inlined
		// into it), kept in the process's frame cache: the site holds a pointer, not
		// a frame of its own (48 bytes a site, 0.5 MB at 10 000 sites).
		if f := stackcapture.SiteFrameOfPC(s.pc); f != nil {
			fp = f
		} else {
			f := stackcapture.SiteOfPC(s.pc)
			fp = &f
		}
	}
	// Racing first calls symbolize the same PC: either store will do.
	s.frame.CompareAndSwap(nil, fp)
	return *fp
}

// ringSize is how many consecutive registration cycles keep their own age
// slot; older registrations are pooled as "ringSize cycles or more".
const ringSize = 16

// AgeBuckets is the length of SiteStats.Survived: exact ages 0 to
// AgeBuckets-2, and a last bucket for AgeBuckets-1 cycles or more.
const AgeBuckets = ringSize + 1

// ageRing counts a site's outstanding registrations by the GC cycle they
// were made in, for the last ringSize cycles, plus one pool for all older
// ones. A cycle's slot is 32 bits: 2^31 objects outstanding from one site
// and one cycle would take more than 100 GiB of finalizer specials alone;
// the pool, which sums cycles, is 64. Adding and removing are single atomic adds; moving a slot that falls
// out of the window into the pool ("folding") happens under mu, at most once
// per site per cycle, on whichever path first notices the cycle moved. The
// first registration in a cycle also observes the entry for the growth
// model, under the same lock.
type ageRing struct {
	slot [ringSize]atomic.Int32 // first: a cache line of its own in a site (see site)
	mu   sync.Mutex
	base atomic.Uint32 // oldest cycle that still has its own slot
	seen atomic.Uint32 // latest cycle a registration folded and observed the ring in
	old  atomic.Int64  // outstanding registered before base
	g    growth        // the growth model's state (growth.go), under mu
}

func (r *ageRing) add(cyc uint32) {
	if cyc != r.seen.Load() {
		r.newCycle(cyc)
	}
	r.slot[cyc%ringSize].Add(1)
}

// newCycle runs on an entry's first registration in GC cycle cyc (once
// per entry and cycle, or again for a registration that loaded an older
// clock): it folds the ring, so that cyc's slot is free, and observes the
// entry's suspects for the growth model.
func (r *ageRing) newCycle(cyc uint32) {
	r.mu.Lock()
	var out [AgeBuckets]uint64
	r.survivedLocked(cyc, &out) // folds
	r.g.observe(cyc, suspects(&out, r.g.suspectCycles()))
	if cyc-r.seen.Load()-1 < 1<<31 { // only forward
		r.seen.Store(cyc)
	}
	r.mu.Unlock()
}

// suspects sums the registrations that survived at least n cycles.
func suspects(survived *[AgeBuckets]uint64, n int) (sum uint64) {
	for age := n; age < AgeBuckets; age++ {
		sum += survived[age]
	}
	return sum
}

// remove uncounts a registration made in cycle cyc, now that the current
// cycle is cur. A registration close to falling out of the window takes the
// lock, so that it cannot race with the fold that moves its slot; one well
// inside the window would need two GC cycles to pass between its two atomic
// loads for that to happen.
func (r *ageRing) remove(cyc, cur uint32) {
	if cur-cyc >= ringSize-2 {
		r.mu.Lock()
		if cyc-r.base.Load() >= ringSize { // before base (unsigned wrap)
			r.old.Add(-1)
		} else {
			r.slot[cyc%ringSize].Add(-1)
		}
		r.mu.Unlock()
		return
	}
	r.slot[cyc%ringSize].Add(-1)
}

func (r *ageRing) foldLocked(cur uint32) {
	b := r.base.Load()
	if cur-b > 1<<31 { // cur is behind base: nothing to fold
		return
	}
	if cur-b >= 2*ringSize { // far behind: every slot goes to the pool
		for i := range r.slot {
			r.old.Add(int64(r.slot[i].Swap(0)))
		}
		r.base.Store(cur - ringSize + 1)
		return
	}
	for ; cur-b >= ringSize; b++ {
		r.base.Store(b + 1)
		r.old.Add(int64(r.slot[b%ringSize].Swap(0)))
	}
}

// read fills out (zeroed by the caller) with the outstanding count by
// cycles survived as of cycle cur, and returns the suspects (those that
// survived at least n cycles) and what the growth model makes of them,
// after observing them if this is the entry's first read in cycle cur.
func (r *ageRing) read(cur uint32, n int, out *[AgeBuckets]uint64) (suspect uint64, class Class, grown uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.g.setSuspectCycles(n)
	r.survivedLocked(cur, out)
	suspect = suspects(out, n)
	r.g.observe(cur, suspect)
	class, grown = r.g.classify(suspect)
	return suspect, class, grown
}

// survivedLocked adds to out the outstanding count by cycles survived as
// of cycle cur.
func (r *ageRing) survivedLocked(cur uint32, out *[AgeBuckets]uint64) {
	r.foldLocked(cur)
	b := r.base.Load()
	for i := range uint32(ringSize) {
		c := b + i
		n := r.slot[c%ringSize].Load()
		if n <= 0 {
			continue
		}
		age := cur - c
		if c-cur < 1<<31 && c != cur { // registered "after" cur: a racing add
			age = 0
		}
		if age >= AgeBuckets-1 {
			age = AgeBuckets - 1
		}
		out[age] += uint64(n)
	}
	if n := r.old.Load(); n > 0 {
		out[AgeBuckets-1] += uint64(n)
	}
}

// durationBounds are the upper bounds of the run-time histogram buckets.
var durationBounds = [...]time.Duration{
	time.Microsecond, 5 * time.Microsecond, 10 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, time.Second,
}

var durationBoundsSeconds = func() []float64 {
	s := make([]float64, len(durationBounds))
	for i, d := range durationBounds {
		s[i] = d.Seconds()
	}
	return s
}()

// DurationBounds returns the upper bounds, in seconds, of the buckets of
// SiteStats.Duration. The slice is a copy.
func DurationBounds() []float64 { return append([]float64(nil), durationBoundsSeconds...) }

// durBuckets is the number of buckets of a run-time histogram.
const durBuckets = len(durationBounds) + 1

// durHist is a fixed-bucket histogram of run times updated with atomics.
type durHist struct {
	counts [durBuckets]atomic.Uint64
	sumNs  atomic.Uint64
}

func (h *durHist) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	for i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	// A timed run stands for DurationSampleRate runs (see there).
	h.counts[i].Add(DurationSampleRate)
	h.sumNs.Add(DurationSampleRate * uint64(d))
}

// lazyHist is a site's run-time histogram, allocated on the site's first
// run: a site whose callbacks never run (a leak's, a long-lived cache's)
// pays 8 bytes for it instead of 112. Readers treat a nil histogram as an
// empty one.
type lazyHist struct{ p atomic.Pointer[durHist] }

// observe counts a run of duration d, allocating the histogram on the
// first. Racing first runs allocate one each; one wins, and each observes
// into the winner.
func (l *lazyHist) observe(d time.Duration) {
	h := l.p.Load()
	if h == nil {
		h = new(durHist)
		if !l.p.CompareAndSwap(nil, h) {
			h = l.p.Load()
		}
	}
	h.observe(d)
}

// snapshot reads the histogram; its Counts are counts[:buckets], which
// the caller supplies (one backing array serves a whole ledger read).
func (l *lazyHist) snapshot(counts []uint64) Histogram {
	out := Histogram{Bounds: durationBoundsSeconds, Counts: counts[:durBuckets:durBuckets]}
	h := l.p.Load()
	if h == nil {
		clear(out.Counts)
		return out
	}
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
		out.Count += out.Counts[i]
	}
	out.Sum = time.Duration(h.sumNs.Load()).Seconds()
	return out
}

// addTo adds the histogram's counts to c and returns its count and sum.
func (l *lazyHist) addTo(c *[durBuckets]uint64) (count, sumNs uint64) {
	h := l.p.Load()
	if h == nil {
		return 0, 0
	}
	for i := range h.counts {
		n := h.counts[i].Load()
		c[i] += n
		count += n
	}
	return count, h.sumNs.Load()
}
