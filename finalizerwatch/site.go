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
// A registration, a clear and a run each add to one per-cycle counter and
// no other (a run also to executed, a cleanup's settled Stop to cleared):
// the counts the ledger reports are sums of them, read under the entry's
// lock (see counts). Every atomic add is a locked instruction that the core
// waits for: per-cycle counters replace the registered and cleared totals
// and the outstanding slots that a registration and a clear each added to
// before, two adds instead of four for a set and a clear.
//
// A watcher may hold a few thousand entries (MaxSitesLimit: millions), so
// the layout is kept tight: a 352-byte table node with the table's hash and
// key. What not every entry needs is allocated on first use: the run-time
// histogram on the entry's first run, the symbolized site on its first
// read.
//
// The fields are laid out by who writes them, in the node's cache lines
// (TestSiteLayout), because registrations and callbacks of one site run on
// different cores at once (the finalizer goroutine; a program that keeps
// making and dropping objects): a line that one side writes and the other
// reads moves between the cores on nearly every operation. The first line,
// with the table's hash and key, and the second, the registrations'
// per-cycle counters, are the registrations' alone; the third holds the
// ends' per-cycle counters (clears and runs); the fourth is the
// callbacks' (their counters) and otherwise read-only; the rest is
// read-mostly. So the callbacks' side must not read the first line: it is
// given its kind rather than reading s.kind (see done).
type site struct {
	// The registrations' line (with the node's hash and key): set once.
	stack *stackcapture.Stack // the key (full stacks) or the first registration's stack
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
	// variant is, in the runtime build mode, what the standard library's
	// registrations at an indirect entry's return PC register beyond
	// their type (resVariantListener: net.Listen's socket, not a
	// connection; runtime.go's resVariantAt).
	variant uint8
	// streak is the growth model's record of the site's current run of
	// new highs (growth.go), under ages.mu. It sits here, in the node's
	// first line, because the rest is full: it is written at most once
	// per ledger cycle, where registrations only read this line.
	streak streak
	_      [4]byte // the node's second line starts with reg

	// reg counts the registrations made in each cycle of the ring's
	// window, ends those of them that ran or were cleared (mod 2^32;
	// see ageRing).
	reg  [ringSize]atomic.Uint32
	ends [ringSize]atomic.Uint32

	// The callbacks' line: set once, or counted by callbacks.
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

	// Read-mostly: the ring's state, and counts that change rarely.
	ages ageRing
	// cleared counts a cleanup's Stops, once settled (cleanup.go); a
	// finalizer's clears are what ends counts beyond executed.
	cleared atomic.Uint64
	// rare holds the counts of the rare counters (Counter.rare:
	// ClearedOutside), nil until the entry's first.
	rare atomic.Pointer[rareCounts]
}

// maxRare is how many rare counters a rare table holds: one cache line.
const maxRare = 8

// rareCounts is an entry's rare table, indexed by slot (rareSlot).
type rareCounts [maxRare]atomic.Uint64

// addRare adds n to the entry's rare counter in slot (rareSlot), and
// allocates the entry's rare table at its first.
func (s *site) addRare(slot int, n uint64) {
	r := s.rare.Load()
	if r == nil {
		r = new(rareCounts)
		if !s.rare.CompareAndSwap(nil, r) {
			r = s.rare.Load()
		}
	}
	r[slot].Add(n)
}

// addReg is Watcher.account's atomic add, for a registration in cycle cyc when the
// ring was folded for it.
func (s *site) addReg(cyc uint32) {
	if s.reg[cyc%ringSize].Add(1) == 0 {
		s.ages.regWraps.Add(1)
	}
}

// addRegAt counts n registrations made in cycle cyc, at any time after
// (the runtime build mode's counts from the P's tables, rtpcounts.go), in
// GC cycle cur, the clock of s's kind: in cyc's slot, or in the pool if
// the ring has moved past it (see countAt).
func (s *site) addRegAt(cyc, cur, n uint32) {
	s.countAt(&s.reg, &s.ages.oldReg, &s.ages.regWraps, cyc, cur, n)
}

// countAt adds n to cycle cyc's slot of ring (s.reg or s.ends), in GC
// cycle cur, or to the pool old once the ring has moved past cyc, and
// counts a wrap of the slot in wraps. A slot close to falling out of the
// window is counted under the lock, so that it cannot race with the fold
// that moves it; one well inside the window would need two GC cycles to
// pass between the caller's load of cur and the add for that to happen.
func (s *site) countAt(ring *[ringSize]atomic.Uint32, old *atomic.Uint64, wraps *atomic.Int32, cyc, cur, n uint32) {
	if cur-cyc >= ringSize-2 {
		s.ages.mu.Lock()
		if cyc-s.ages.base.Load() >= ringSize { // before base (unsigned wrap)
			old.Add(uint64(n))
		} else if ring[cyc%ringSize].Add(n) < n {
			wraps.Add(1)
		}
		s.ages.mu.Unlock()
		return
	}
	if ring[cyc%ringSize].Add(n) < n {
		wraps.Add(1)
	}
}

// unaccount takes back a registration made in cycle cyc that the runtime
// refused.
func (s *site) unaccount(cyc uint32) {
	s.ages.mu.Lock()
	defer s.ages.mu.Unlock()
	if cyc-s.ages.base.Load() >= ringSize { // folded: before base
		s.ages.oldReg.Add(^uint64(0))
		return
	}
	if s.reg[cyc%ringSize].Add(^uint32(0)) == ^uint32(0) {
		s.ages.regWraps.Add(-1)
	}
}

// done counts the end of an outstanding registration of kind k made in
// cycle cyc, now that it ran or was cleared: one atomic add. k is s.kind,
// which the callbacks' side knows without reading the registrations' cache
// line (see site). A registration close to falling out of the window takes
// the lock, so that it cannot race with the fold that moves its slot; one
// well inside the window would need two GC cycles to pass between its two
// atomic loads for that to happen.
func (s *site) done(k Kind, cyc uint32) { s.doneAt(cyc, s.w.cycles[k].Load()) }

// doneAt is done in the GC cycle cur, the clock of s's kind as the caller
// read it at the end.
func (s *site) doneAt(cyc, cur uint32) { s.endsAt(cyc, cur, 1) }

// endsAt is doneAt for n ends.
func (s *site) endsAt(cyc, cur, n uint32) {
	s.countAt(&s.ends, &s.ages.oldDone, &s.ages.doneWraps, cyc, cur, n)
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

// ringSize is how many consecutive registration cycles keep their own
// counters; older registrations are pooled as "ringSize cycles or more".
const ringSize = 16

// AgeBuckets is the length of SiteStats.Survived: exact ages 0 to
// AgeBuckets-2, and a last bucket for AgeBuckets-1 cycles or more.
const AgeBuckets = ringSize + 1

// ageRing is the state of an entry's per-cycle counters (site.reg and
// site.ends) beyond the counters themselves. Cycle c's registrations and
// ends are counted in slot c%ringSize for the last ringSize cycles; a
// slot that falls out of the window is moved into the pools (oldReg,
// oldDone) under mu ("folding"), at most once per entry per cycle, on
// whichever path first notices the cycle moved. The first registration in
// a cycle also observes the entry for the growth model, under the same
// lock.
//
// A slot is 32 bits and wraps: what is outstanding from one cycle, reg
// minus done mod 2^32, is exact as long as fewer than 2^31 of them are
// (that would take more than 100 GiB of finalizer specials alone). The
// totals count the wraps: an add that wraps a slot to 0 adds one to
// regWraps or doneWraps. A reader that loads between the two sees a total
// 2^32 low for an instant, which is why counts reports the highest total
// it has reported (hwReg, hwCleared).
type ageRing struct {
	mu                  sync.Mutex
	base                atomic.Uint32 // oldest cycle that still has its own slot
	seen                atomic.Uint32 // latest cycle a registration folded and observed the ring in
	regWraps, doneWraps atomic.Int32
	oldReg, oldDone     atomic.Uint64 // folded: registrations made before base, and their ends
	hwReg, hwCleared    uint64        // the highest totals counts reported, under mu
	g                   growth        // the growth model's state (growth.go), under mu
}

// newCycle runs on an entry's first registration in GC cycle cyc (once
// per entry and cycle, or again for a registration that loaded an older
// clock): it folds the ring, so that cyc's slot is free, and observes the
// entry's suspects for the growth model.
func (s *site) newCycle(cyc uint32) {
	r := &s.ages
	r.mu.Lock()
	var out [AgeBuckets]uint64
	s.survivedLocked(cyc, &out) // folds
	r.g.observe(cyc, suspects(&out, s.suspectAge(r.g.suspectCycles())), &s.streak)
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

// foldSlot moves slot i into the pools. Under mu.
func (s *site) foldSlot(i uint32) {
	s.ages.oldReg.Add(uint64(s.reg[i].Swap(0)))
	s.ages.oldDone.Add(uint64(s.ends[i].Swap(0)))
}

func (s *site) foldLocked(cur uint32) {
	r := &s.ages
	b := r.base.Load()
	if cur-b > 1<<31 { // cur is behind base: nothing to fold
		return
	}
	if cur-b >= 2*ringSize { // far behind: every slot goes to the pool
		for i := range uint32(ringSize) {
			s.foldSlot(i)
		}
		r.base.Store(cur - ringSize + 1)
		return
	}
	for ; cur-b >= ringSize; b++ {
		r.base.Store(b + 1)
		s.foldSlot(b % ringSize)
	}
}

// countsLocked reads the entry's counters, as of cycle cur. Under mu.
//
// The loads are ordered so that no count is ever ahead of the truth:
// done before executed (a run adds to executed first, then to done, so
// done minus executed never counts a run as a clear), and both before the
// registrations (so that outstanding never counts an end whose
// registration it missed). Cleared can then read low for an instant, and
// a wrap can make a total read low (see ageRing): each is reported as the
// highest value reported so far, so that counters never go down.
func (s *site) countsLocked(cur uint32) Counts {
	r := &s.ages
	s.foldLocked(cur)
	var regN, doneN uint64
	for i := range s.ends {
		doneN += uint64(s.ends[i].Load())
	}
	doneN += r.oldDone.Load() + uint64(int64(r.doneWraps.Load()))<<32
	c := Counts{Executed: s.executed.Load()}
	if rare := s.rare.Load(); rare != nil {
		for slot, i := range rareCounters {
			*c.at(i) = rare[slot].Load()
		}
	}
	if s.kind == KindCleanup {
		// A Stop ends the registration's age at once, but counts as
		// cleared only once settled (cleanup.go): until then it is
		// outstanding, not a suspect.
		c.Cleared = s.cleared.Load()
	} else if doneN > c.Executed {
		c.Cleared = doneN - c.Executed
	}
	for i := range s.reg {
		regN += uint64(s.reg[i].Load())
	}
	regN += r.oldReg.Load() + uint64(int64(r.regWraps.Load()))<<32
	r.hwReg = max(r.hwReg, regN)
	r.hwCleared = max(r.hwCleared, c.Cleared)
	c.Registered, c.Cleared = r.hwReg, r.hwCleared
	// Registered = Executed + Cleared + Outstanding, as reported.
	if ended := c.Executed + c.Cleared; c.Registered > ended {
		c.Outstanding = c.Registered - ended
	}
	if resourceOf(s.res).DroppedWithoutClose {
		c.Dropped = c.Executed
	}
	return c
}

// used reports whether the entry ever counted a registration.
func (s *site) used() bool {
	for i := range s.reg {
		if s.reg[i].Load() != 0 {
			return true
		}
	}
	return s.ages.oldReg.Load() != 0 || s.ages.regWraps.Load() != 0
}

// counts reads the entry's counters (see countsLocked).
func (s *site) counts() Counts {
	cur := s.w.cycles[s.kind].Load()
	s.ages.mu.Lock()
	defer s.ages.mu.Unlock()
	return s.countsLocked(cur)
}

// read fills out (zeroed by the caller) with the outstanding count by
// cycles survived as of cycle cur, and returns the suspects (those that
// survived at least n cycles) and what the growth model makes of them,
// after observing them if this is the entry's first read in cycle cur.
func (s *site) read(cur uint32, n int, out *[AgeBuckets]uint64) (suspect uint64, class Class, grown uint64) {
	r := &s.ages
	r.mu.Lock()
	defer r.mu.Unlock()
	r.g.setSuspectCycles(n)
	s.survivedLocked(cur, out)
	suspect = suspects(out, s.suspectAge(n))
	r.g.observe(cur, suspect, &s.streak)
	class, grown = r.g.classify(suspect)
	if class == ClassGrowing && !r.g.rising() && !s.w.spanned(s.kind, s.streak.from, s.streak.high) {
		// New highs, but not yet for the suspect age: a pool filling, a
		// batch of start-up files crossing it, until they go on.
		class = ClassStable
	}
	return suspect, class, grown
}

// suspectAge is the age, in ledger cycles, from which the entry's
// outstanding registrations are suspects: n, the watcher's
// SuspectCycles, or more while the ledger's younger cycles began less
// than its suspect age ago (epoch.go).
func (s *site) suspectAge(n int) int {
	if s.w == nil || s.w.suspectAge() <= 0 || n != s.w.cfg.suspectCycles {
		return n
	}
	return max(n, s.w.suspectAgeOf(s.kind))
}

// survivedLocked adds to out the outstanding count by cycles survived as
// of cycle cur. Under mu.
func (s *site) survivedLocked(cur uint32, out *[AgeBuckets]uint64) {
	r := &s.ages
	s.foldLocked(cur)
	b := r.base.Load()
	for i := range uint32(ringSize) {
		c := b + i
		// Ends first: an end loaded without its registration would count
		// one outstanding too few, not one too many.
		d := s.ends[c%ringSize].Load()
		n := int32(s.reg[c%ringSize].Load() - d)
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
	if n := int64(r.oldReg.Load() - r.oldDone.Load()); n > 0 {
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
