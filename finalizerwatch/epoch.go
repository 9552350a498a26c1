package finalizerwatch

// Ledger cycles judged in time as well as in GC cycles.
//
// Ages in the ledger are counted in the watcher's cycles. Without a
// suspect age (WithSuspectAge, 0 by default here, DefaultSuspectAge in
// the probe) a ledger cycle is a GC cycle, and "survived three cycles" is
// 60 ms on a server that runs fifty GC cycles a second: a pool warming up
// or a file opened at start-up looks like a leak, and a leak of ten files
// a second is less than one a cycle, too slow to be seen growing.
//
// With a suspect age A, a ledger cycle is a run of GC cycles at least
// A/epochsPerAge long: the clock moves on at the first GC cycle that ends
// at least that long after the ledger cycle began. On a program that runs
// one GC cycle a minute each GC cycle is a ledger cycle, as before; on one
// that runs fifty a second, a ledger cycle is A/epochsPerAge of wall time.
// An outstanding registration is a suspect once it has survived both
// SuspectCycles ledger cycles (so at least as many GC cycles) and A of
// wall time, measured from the end of the ledger cycle it was made in,
// so never overstated. The growth model observes each site once per
// ledger cycle, and a site is growing only while its suspects have kept
// reaching new highs over at least A (growth.go): a pool that fills in
// ten seconds never is, a leak of one object every two seconds is within
// 2A and a few ledger cycles.
//
// The clock's start times are kept for the last epochRing ledger cycles,
// at least epochRing*A/epochsPerAge of wall time: older cycles are
// older than A by far, and treated so.

import (
	"sync/atomic"
	"time"
)

const (
	// epochsPerAge is how many ledger cycles, at least, make up the
	// suspect age: a suspect's age in time is known to within one of them.
	epochsPerAge = 6
	// epochRing is how many ledger cycles keep their start time.
	epochRing = 64
)

// epochClock is the time side of one kind's ledger cycles.
type epochClock struct {
	// start[c%epochRing] is when ledger cycle c began, in nanoseconds on
	// the watcher's clock (config.now); written by the tick that begins
	// c, before the cycle count is raised to c.
	start [epochRing]atomic.Int64
	// minAge is the least age, in ledger cycles, at which an outstanding
	// registration is a suspect: SuspectCycles, or more while younger
	// ledger cycles began less than the suspect age ago. Recomputed by
	// each tick that begins a ledger cycle.
	minAge atomic.Uint32
	// aged is set once a ledger cycle that began at least the suspect
	// age ago is known: before, nothing can be a suspect.
	aged atomic.Bool
}

// tick counts one GC cycle of kind k, at now: it begins a new ledger
// cycle unless a suspect age is set and the current one is younger than
// its share of it. It runs on the goroutine that runs kind k's callbacks,
// once per GC cycle, and never blocks.
func (w *Watcher) tick(k Kind, now int64) {
	age := w.suspectAge()
	if age <= 0 {
		w.cycles[k].Add(1)
		return
	}
	e := &w.epochs[k]
	c := w.cycles[k].Load()
	if now-e.start[c%epochRing].Load() < int64(age/epochsPerAge) {
		return
	}
	// Each kind's ticks come from one chain of sentinels, one at a time;
	// a test's tick may race with them, and one of the two begins the
	// cycle.
	// The least age for cycle c+1 is stored first: read with cycle c,
	// it is larger than needed, never smaller.
	e.start[(c+1)%epochRing].Store(now)
	e.minAge.Store(uint32(w.minAgeAt(k, c+1, now)))
	w.cycles[k].CompareAndSwap(c, c+1)
}

// minAgeAt returns the least age, in ledger cycles, at which a
// registration made in a ledger cycle before cur has been outstanding for
// at least the suspect age at now (from the start of the cycle after its
// own), and SuspectCycles at least; AgeBuckets while none is known to
// be.
func (w *Watcher) minAgeAt(k Kind, cur uint32, now int64) int {
	e := &w.epochs[k]
	age := int64(w.suspectAge())
	for n := w.cfg.suspectCycles; n < AgeBuckets && n <= int(cur); n++ {
		// A registration n cycles old (n or more, for the last bucket)
		// was made in cycle cur-n, which ended when cur-n+1 began.
		if now-e.start[(cur-uint32(n)+1)%epochRing].Load() >= age {
			e.aged.Store(true)
			return n
		}
	}
	// None is known to be old enough: the watcher, or its suspect age, is
	// younger than the age. Past AgeBuckets-1, suspects sum nothing.
	return AgeBuckets
}

// suspectAge returns the age, in ledger cycles, from which an outstanding
// registration of kind k is a suspect now.
func (w *Watcher) suspectAgeOf(k Kind) int {
	if w.suspectAge() <= 0 {
		return w.cfg.suspectCycles
	}
	return int(w.epochs[k].minAge.Load())
}

// spanned reports whether the wall time from the start of ledger cycle
// from to the start of ledger cycle to (of kind k, from <= to <= the
// current cycle) is at least the suspect age: always, without one. A cycle
// that has left the ring began long before.
func (w *Watcher) spanned(k Kind, from, to uint32) bool {
	age := w.suspectAge()
	if age <= 0 {
		return true
	}
	cur := w.cycles[k].Load()
	if cur-from >= epochRing {
		return true
	}
	e := &w.epochs[k]
	return e.start[to%epochRing].Load()-e.start[from%epochRing].Load() >= int64(age)
}

// SuspectAge returns the watcher's suspect age (WithSuspectAge), 0 for
// none.
func (w *Watcher) SuspectAge() time.Duration { return w.suspectAge() }

func (w *Watcher) suspectAge() time.Duration { return time.Duration(w.age.Load()) }

// SetSuspectAge sets the watcher's suspect age (see WithSuspectAge), from
// now on: the probe sets its default on the watcher it reports. Ages in
// time count from the call, at the latest: for d of the suspect age after
// a change, nothing is a suspect that was not one by cycles alone before,
// and is not one yet by time. It returns an error for a d that
// WithSuspectAge refuses.
func (w *Watcher) SetSuspectAge(d time.Duration) error {
	if err := checkSuspectAge("(*Watcher).SetSuspectAge", d); err != nil {
		return err
	}
	w.ageMu.Lock()
	defer w.ageMu.Unlock()
	if w.suspectAge() == d {
		return nil
	}
	w.age.Store(int64(d))
	w.resetEpochs(w.cfg.now())
	return nil
}

// resetEpochs makes every ledger cycle begin at now, as far as the age
// goes: nothing is known to be older.
func (w *Watcher) resetEpochs(now int64) {
	for k := range w.epochs {
		e := &w.epochs[k]
		e.aged.Store(false)
		for i := range e.start {
			e.start[i].Store(now)
		}
		e.minAge.Store(uint32(w.minAgeAt(Kind(k), w.cycles[k].Load(), now)))
	}
}

// moreTimeNeeded returns how much longer, at least, the watcher must run
// before a registration of kind k can be a suspect by the suspect age: 0
// once one can, or without a suspect age. The oldest registrations the
// ledger keeps apart were made in the cycle AgeBuckets-1 before the
// current one (or the first), and are that old once the age has passed
// since the cycle after theirs began (or the current one, if none has).
func (w *Watcher) moreTimeNeeded(k Kind, now int64) time.Duration {
	age := w.suspectAge()
	e := &w.epochs[k]
	if age <= 0 || e.aged.Load() {
		return 0
	}
	c := w.cycles[k].Load()
	oldest := c - min(c, AgeBuckets-1)
	since := e.start[min(oldest+1, c)%epochRing].Load()
	return max(0, time.Duration(since+int64(age)-now))
}
