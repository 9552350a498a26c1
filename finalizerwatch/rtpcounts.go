package finalizerwatch

import (
	"sync"
	"sync/atomic"
)

// The runtime build mode's counts on the P.
//
// In the runtime build mode the hooks do not count a registration at a
// known site, nor any clear or Stop, with an atomic add: the patched
// runtime counts them, with plain adds, in a table of the P that runs
// them (gcprobeCountOnP in cmd/finalizercheck/rtpatch), as the runtime
// keeps its own per-P statistics, and the ledger moves the tables' counts
// into its entries (rtSettle) before it reads them: in every Read and
// Rank, and before an entry's first registration in a GC cycle observes
// it for the growth model (once per GC cycle for all of them). An atomic
// add is a locked instruction the core waits for; two of them were most
// of what the mode added to a set+clear.
//
// The move is exact: the runtime empties every P's table at a safe point
// of that P (forEachP, the collector's "ragged barrier"), never while a
// count is being made, with the Ps that GOMAXPROCS retired; a count the
// table had no room for is counted by the hooks at once (countReg,
// finalizerClear, cleanupStop). What a read sees is what had happened
// when its move ran.

// rtTokOnP, in a registration hook's token, asks the runtime to count the
// registration on its P; rtTokCleanup marks a cleanup's count in the
// runtime's output (the runtime's gcprobeTokOnP and gcprobeTokCleanup).
// Tokens use 47 bits (gcprobeTokMax).
const (
	rtTokOnP     uint64 = 1 << 62
	rtTokCleanup uint64 = 1 << 63
)

// rtCount is laid out as the runtime's gcprobeCount.
type rtCount struct {
	tok       uint64
	reg, ends uint32
}

var (
	// rtOnP is set once a Watcher was attached: from then on the runtime
	// counts on the P, and reads move its counts.
	rtOnP atomic.Bool

	rtSettleMu  sync.Mutex
	rtSettleBuf []rtCount // under rtSettleMu; the heap's, as the runtime requires
	// rtSettled is the GC cycle of each kind as of the last move.
	rtSettled [numKinds]atomic.Uint32
)

// rtSettle moves the counts in the Ps' tables into the attached
// Watcher's entries. The runtime refuses (and nothing moves) on a
// goroutine that holds a runtime lock, which no caller does.
func rtSettle() {
	w := rtW.Load()
	if w == nil || !rtOnP.Load() {
		return
	}
	rtSettleMu.Lock()
	defer rtSettleMu.Unlock()
	cyc := [numKinds]uint32{w.cycles[KindFinalizer].Load(), w.cycles[KindCleanup].Load()}
	n := rtFlushCounts(rtSettleBuf)
	for n < 0 {
		rtSettleBuf = make([]rtCount, -n)
		n = rtFlushCounts(rtSettleBuf)
	}
	for _, c := range rtSettleBuf[:n] {
		k := KindFinalizer
		if c.tok&rtTokCleanup != 0 {
			k = KindCleanup
		}
		rtApply(k, c.tok&^rtTokCleanup, c.reg, c.ends)
	}
	for k := range cyc {
		rtSettled[k].Store(cyc[k])
	}
}

// rtSettleCycle is rtSettle, unless a move already ran in w's current GC
// cycle of both kinds.
func rtSettleCycle(w *Watcher) {
	if rtSettled[KindFinalizer].Load() == w.cycles[KindFinalizer].Load() &&
		rtSettled[KindCleanup].Load() == w.cycles[KindCleanup].Load() {
		return
	}
	rtSettle()
}

// rtApply counts reg registrations and ends clears or Stops of the
// registrations of kind k that token tok names: registrations first, so
// that a read racing with it never counts an end without its
// registration.
func rtApply(k Kind, tok uint64, reg, ends uint32) {
	s, cyc, cur := rtTokenSite(k, tok)
	if s == nil {
		return
	}
	if reg != 0 {
		s.addRegAt(cyc, cur, reg)
	}
	if ends != 0 {
		if k == KindCleanup {
			s.cleared.Add(uint64(ends)) // as countClearedAt
		}
		s.endsAt(cyc, cur, ends)
	}
}

// rtCountReg is the hook that counts a registration the P's table had no
// room for.
func rtCountReg(kind uintptr, tok uint64) {
	if kind < uintptr(numKinds) {
		rtApply(Kind(kind), tok, 1, 0)
	}
}
