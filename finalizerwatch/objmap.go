package finalizerwatch

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gcprobe/probe/internal/gcclock"
)

// objMap finds the ledger entry of an object's finalizer by the object's
// address. An entry is added before runtime.SetFinalizer and removed when
// the finalizer runs or is cleared through finalizerwatch. Keys are
// addresses (uintptr), not pointers: the map must not keep the objects
// alive. It is bounded by the number of objects with a finalizer set
// through finalizerwatch, which the runtime holds a record of anyway.
//
// There is one table per process (objs), shared by every Watcher, because
// the runtime keeps one finalizer per object whoever set it: a clear made
// through one Watcher finds the entry another one added.
//
// An entry can go stale: a finalizer set through finalizerwatch and then
// cleared with runtime.SetFinalizer directly (and perhaps set again
// directly) leaves its entry behind, and once the object is freed its
// address can be reused. A stale entry keeps nothing of the user's alive:
// an entry holds the user's finalizer only where that is static, in the
// executable's image (see heldFinalizer). Nothing
// tells the watcher when that happens (telling a freed object from a live
// one at the same address would take a weak pointer per registration,
// measured at several times the cost of runtime.SetFinalizer itself), so a
// stale entry is resolved when its address is registered again: put
// replaces it and returns it, and the caller counts it as cleared outside
// the watcher.
//
// It is sharded, and each shard is an open-addressing table with linear
// probing rather than a Go map: registrations come and go all the time,
// and a Go map's deleted slots (tombstones) lengthen every later probe
// until the next rehash, where backward-shift deletion leaves none. One
// probe sequence both detects a duplicate and finds the free slot.
type objMap struct {
	shards [objShards]objShard
	// idle has bit i set while shard i waits to shrink: exactly while its
	// lowSince is set (shrink sets both, notLow clears both). idleBusy is
	// set while a shrinkIdle pass runs. See tickIdle.
	idle     atomic.Uint64
	idleBusy atomic.Bool
}

const (
	objShardBits = 6
	objShards    = 1 << objShardBits
	minShardBits = 4 // 16 slots
)

type objShard struct {
	mu    sync.Mutex
	slots []objSlot // 1<<bits slots, at most half full
	bits  uint
	n     int
	// lowSince is the GC cycle (gcclock's finalizer chain, plus one) in
	// which the shard was first seen less than an eighth full since it
	// last was fuller; 0 while it is not. See take.
	lowSince uint64
	_        [8]byte // keep shards on separate cache lines
}

type objSlot struct {
	addr uintptr // 0: empty
	e    finEntry
}

// finEntry is what the finalizer wrapper needs when the object's finalizer
// runs or is cleared. The site knows its Watcher.
type finEntry struct {
	// ref is the registration's *site, or its *stackSample if call has
	// callSampled set (see sample.go).
	ref unsafe.Pointer
	// fn is the user's finalizer as finFunc keeps it: the func value, or
	// for callReflect a pointer to it in an interface; nil where the
	// runtime holds the user's finalizer itself (see heldFinalizer), so
	// that an entry left behind by a direct clear keeps nothing alive.
	fn   unsafe.Pointer
	cyc  uint32
	call callKind
}

// site returns the site the registration is counted at.
func (e *finEntry) site() *site { return refSite(e.ref, e.call&callSampled != 0) }

// sample returns the registration's sampled stack, or nil.
func (e *finEntry) sample() *stackSample { return refSample(e.ref, e.call&callSampled != 0) }

// entryRef returns what a finEntry or cleanupHeader of a registration at s,
// sampled as smp (nil if not sampled), points to.
func entryRef(s *site, smp *stackSample) unsafe.Pointer {
	if smp != nil {
		return unsafe.Pointer(smp)
	}
	return unsafe.Pointer(s)
}

// refSite returns the site of a registration whose record points to ref
// (see entryRef), sampled or not.
func refSite(ref unsafe.Pointer, sampled bool) *site {
	if sampled {
		return (*stackSample)(ref).site
	}
	return (*site)(ref)
}

// refSample returns the sampled stack of a registration whose record
// points to ref, or nil if it was not sampled.
func refSample(ref unsafe.Pointer, sampled bool) *stackSample {
	if sampled {
		return (*stackSample)(ref)
	}
	return nil
}

// countCleared counts a registration of kind k made in cycle cyc at s
// (and under smp, if sampled) as cleared.
func countCleared(k Kind, s *site, smp *stackSample, cyc uint32) {
	countClearedAt(k, s, smp, cyc, s.w.cycles[k].Load())
}

// countClearedAt is countCleared in the GC cycle cur, the clock of kind k
// as the caller read it.
func countClearedAt(k Kind, s *site, smp *stackSample, cyc, cur uint32) {
	if k == KindCleanup {
		s.cleared.Add(1) // a finalizer's clears are what ends counts beyond executed
	}
	s.doneAt(cyc, cur)
	if smp != nil {
		smp.cleared.Add(1)
	}
}

// Where an address goes. Objects that are registered one after another
// were mostly allocated one after another, from one span, at neighbouring
// addresses; a table that scattered them (as a plain hash does) would take
// a cache miss on nearly every registration once it outgrows the cache. So
// the address is split: its chunk (addr >> chunkShift, 1 KiB of memory) is
// hashed, choosing the shard and a base slot, and its offset in the chunk,
// in words, is added to the base. Neighbouring objects land in
// neighbouring slots, one cache line holding the entries of several, while
// chunks still spread evenly; a chunk's run is at most chunkSlots long, so
// runs of different chunks that overlap lengthen probes by at most that.
const (
	chunkShift = 10
	chunkSlots = 1 << (chunkShift - 3)
)

// objHash is Fibonacci hashing of addr's chunk: the top bits of the product
// choose the shard, the bits below them the chunk's base slot.
func objHash(addr uintptr) uint64 { return uint64(addr>>chunkShift) * 0x9e3779b97f4a7c15 }

func (m *objMap) shard(h uint64) *objShard { return &m.shards[shardIndex(h)] }

// shardIndex returns the index of the shard of hash h.
func shardIndex(h uint64) int { return int(h >> (64 - objShardBits)) }

// home returns the first slot of addr's probe sequence; h is objHash(addr).
func (s *objShard) home(addr uintptr, h uint64) int {
	base := (h << objShardBits) >> (64 - s.bits)
	return int((base + uint64(addr>>3)%chunkSlots) & (1<<s.bits - 1))
}

// objs is the process's address table.
var objs objMap

// put stores e for addr. If addr already had an entry, put replaces it and
// returns the old one.
func (m *objMap) put(addr uintptr, e finEntry) (old finEntry, replaced bool) {
	s, h := m.lock(addr)
	old, replaced = m.putLocked(s, h, addr, e)
	s.mu.Unlock()
	return old, replaced
}

// take removes and returns the entry for addr.
func (m *objMap) take(addr uintptr) (finEntry, bool) {
	s, h := m.lock(addr)
	e, ok := m.takeLocked(s, h, addr)
	s.mu.Unlock()
	return e, ok
}

// lock locks the shard of addr and returns it, with addr's hash, for
// putLocked and takeLocked; the caller unlocks s.mu. SetFinalizer and its
// clear hold the lock across their runtime.SetFinalizer call, so that a
// set and a clear of one object, racing, reach the table and the runtime
// in the same order: the entry is there exactly when the runtime holds the
// watcher's finalizer (unless it was cleared directly).
func (m *objMap) lock(addr uintptr) (*objShard, uint64) {
	h := objHash(addr)
	s := m.shard(h)
	s.mu.Lock()
	return s, h
}

// putLocked is put under the lock of s, addr's shard (h its hash).
func (m *objMap) putLocked(s *objShard, h uint64, addr uintptr, e finEntry) (old finEntry, replaced bool) {
	if 2*(s.n+1) > len(s.slots) {
		s.resize(max(minShardBits, s.bits+1))
	}
	if s.lowSince != 0 { // the shard has been little used: see shrink
		m.recheckLow(s, shardIndex(h), s.n+1)
	}
	mask := len(s.slots) - 1
	i := s.home(addr, h)
	for s.slots[i].addr != 0 {
		if s.slots[i].addr == addr {
			old = s.slots[i].e
			s.slots[i].e = e
			return old, true
		}
		i = (i + 1) & mask
	}
	s.slots[i] = objSlot{addr: addr, e: e}
	s.n++
	return finEntry{}, false
}

// takeLocked is take under the lock of s, addr's shard (h its hash).
func (m *objMap) takeLocked(s *objShard, h uint64, addr uintptr) (finEntry, bool) {
	if s.n == 0 {
		return finEntry{}, false
	}
	mask := len(s.slots) - 1
	i := s.home(addr, h)
	for s.slots[i].addr != addr {
		if s.slots[i].addr == 0 {
			return finEntry{}, false
		}
		i = (i + 1) & mask
	}
	e := s.slots[i].e
	s.deleteAt(i, mask)
	s.n--
	if s.bits > minShardBits && 8*s.n < len(s.slots) {
		m.shrink(s, shardIndex(h))
	}
	return e, true
}

// shrink gives memory back after a burst, once it is over: a shard less
// than an eighth full shrinks to a quarter full, but only once it has
// stayed under an eighth for two GC cycles. Shrinking as soon as it
// empties would make a program that registers and drops a batch of objects
// in each cycle grow and shrink the table with every batch, allocating and
// copying it each time. The check runs on the shard's puts and takes, and,
// for a shard that no put or take comes to any more (the burst is over and
// the program registers elsewhere, or not at all), once per GC cycle off
// the finalizer goroutine (tickIdle); without a running GC-cycle clock (no
// watcher open), the memory is kept. s is shard i; under s.mu.
func (m *objMap) shrink(s *objShard, i int) {
	cur := gcclock.Ticks(gcclock.Finalizer) + 1
	switch {
	case s.lowSince == 0:
		s.lowSince = cur
		m.idle.Or(1 << i)
	case cur-s.lowSince >= 2:
		bits := uint(minShardBits)
		for 4*s.n > 1<<bits {
			bits++
		}
		if bits < s.bits {
			s.resize(bits)
		}
		m.notLow(s, i)
	}
}

// notLow records that shard i (s) no longer waits to shrink. Under s.mu.
func (m *objMap) notLow(s *objShard, i int) {
	s.lowSince = 0
	m.idle.And(^uint64(1 << i)) // or the next tick starts a pass for nothing
}

// recheckLow looks again at shard i, which has been little used since
// lowSince, now that it will hold n entries: used again, it waits no more;
// still little used, it shrinks once two cycles have passed. Under s.mu.
func (m *objMap) recheckLow(s *objShard, i, n int) {
	if 8*n >= len(s.slots) {
		m.notLow(s, i)
	} else {
		m.shrink(s, i)
	}
}

// tickIdle runs on every GC cycle the finalizer chain of the GC-cycle
// clock counts, on the finalizer goroutine: if a shard waits to shrink
// and no pass is running, it starts one on a goroutine of its own, so
// that the tick never waits for a shard's lock or a copy. (A finalizer's
// run may still wait for the lock of a shard the pass is shrinking, as it
// would for a registration's: one copy of a shard under an eighth full.)
func (m *objMap) tickIdle() {
	if m.idle.Load() != 0 && m.idleBusy.CompareAndSwap(false, true) {
		go m.shrinkIdle()
	}
}

// shrinkIdle checks each shard that waits to shrink, as its puts do
// (recheckLow): it shrinks the shards that stayed little used for two cycles, and
// forgets those used again.
func (m *objMap) shrinkIdle() {
	defer m.idleBusy.Store(false)
	for idle := m.idle.Load(); idle != 0; idle &= idle - 1 {
		i := bits.TrailingZeros64(idle)
		s := &m.shards[i]
		s.mu.Lock()
		if s.lowSince != 0 {
			m.recheckLow(s, i, s.n)
		}
		s.mu.Unlock()
	}
}

// deleteAt empties slot i and shifts back the entries after it whose probe
// sequence passed over it, so that lookups still find them.
func (s *objShard) deleteAt(i, mask int) {
	for j := (i + 1) & mask; s.slots[j].addr != 0; j = (j + 1) & mask {
		k := s.home(s.slots[j].addr, objHash(s.slots[j].addr))
		// j may move into the hole at i unless its home k lies cyclically
		// in (i, j]: then i is not on its probe sequence.
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = objSlot{}
}

func (s *objShard) resize(bits uint) {
	old := s.slots
	s.slots = make([]objSlot, 1<<bits)
	s.bits = bits
	mask := len(s.slots) - 1
	for _, sl := range old {
		if sl.addr == 0 {
			continue
		}
		i := s.home(sl.addr, objHash(sl.addr))
		for s.slots[i].addr != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = sl
	}
}

// len returns the number of entries, for tests.
func (m *objMap) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// count returns the number of entries that w's sites hold, for tests.
func (m *objMap) count(w *Watcher) int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, sl := range s.slots {
			if sl.addr != 0 && sl.e.site().w == w {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}
