package finalizerwatch

// The growth model: which sites leak.
//
// Once per GC cycle in which a site's ledger entry registers or is read
// (an observation), its suspect count is compared with the highest the
// entry has had before and with the previous observation's. A site is
// growing when its suspect count reached a new high in at least
// GrowthHighs of its last GrowthWindow observations, or rose in each of
// its last GrowthRun observations (however far below an earlier peak);
// stable when it has suspects but is not growing; churn when it has none.
// Growing sites rank first, by how much their suspects rose over their
// last GrowthWindow observations (Growth). With a suspect age
// (WithSuspectAge, epoch.go) observations are one per ledger cycle, and
// new highs class a site growing only once they have gone on for the
// suspect age (streak): a pool that fills, a start-up batch that crosses
// the age, rise for a while and stop.
//
// New highs see a leak early: two observations of it are enough, and a
// pool or a cache, however its count wavers below its high, makes none. A
// run of rises sees a leak whose count fell first, below a high it will
// take long to beat: a start-up batch released, a cache emptied, while the
// leak goes on. A run must be long, as a cache's count may rise a few
// times in a row by chance; it ends at the first observation that does not
// rise.
//
// The state is 32 bytes per ledger entry, updated under the entry's
// age-ring lock by the paths that already take it: the first registration
// of each cycle (which folds the ring) and reads. A registration otherwise
// costs one atomic load and compare and one atomic add (site.account).

import (
	"math"
	"time"
)

const (
	// GrowthWindow is how many of a site's latest observations (one per GC
	// cycle in which the site registers or is read) the growth model
	// looks at.
	GrowthWindow = 4
	// GrowthHighs is how many of those observations must find a new high
	// of the site's suspect count for the site to be classed growing.
	GrowthHighs = 2
	// GrowthRun is the other way to be classed growing: the site's suspect
	// count rose, by at least one, in each of its last GrowthRun
	// observations (one per GC cycle in which it registers or is read),
	// whatever its highest count before.
	GrowthRun = 8
)

// Class is what the growth model makes of a site.
type Class uint8

// The classes, in increasing order of concern: the ranking puts a higher
// class first.
const (
	// ClassChurn: nothing outstanding at the site has survived
	// SuspectCycles GC cycles; what it registers is collected within a
	// few cycles.
	ClassChurn Class = iota
	// ClassStable: the site has suspects, long-lived registrations, but
	// their count is not growing: a cache or a pool.
	ClassStable
	// ClassGrowing: the site's suspect count keeps reaching new highs, or
	// has risen GrowthRun observations in a row: a leak, or a cache that
	// is still filling.
	ClassGrowing
)

// String returns "churn", "stable" or "growing".
func (c Class) String() string {
	switch c {
	case ClassChurn:
		return "churn"
	case ClassStable:
		return "stable"
	case ClassGrowing:
		return "growing"
	}
	return "unknown"
}

// growth is one ledger entry's growth-model state, guarded by its
// ageRing's mu: 32 bytes. Suspect counts are kept in 32 bits, saturating:
// 2^32 suspects at one site would take hundreds of GiB of the runtime's
// finalizer and cleanup records alone.
type growth struct {
	last uint32 // GC cycle of the latest observation
	i    uint8  // index in gains of the latest observation
	// flags has growthSeen once the entry has been observed, and bit i
	// (below GrowthWindow) while observation i found a new high.
	flags uint8
	// sus is the SuspectCycles the observations count suspects by: the
	// watcher's, learnt at the entry's first read; 0 before that, when
	// registrations observe by DefaultSuspectCycles.
	sus uint8
	run uint8 // consecutive observations that rose, saturating
	// peak is the highest suspect count observed, prev the latest's.
	peak, prev uint32
	// gains[i] is by how much observation i rose: above peak for a new
	// high, above the observation before otherwise; 0 if it did not rise.
	gains [GrowthWindow]uint32
}

const (
	growthSeen = 1 << 7
	highsMask  = 1<<GrowthWindow - 1
)

// rising reports whether the suspect count rose in each of the last
// GrowthRun observations.
func (g *growth) rising() bool { return g.run >= GrowthRun }

// suspectCycles is the threshold observations count suspects by.
func (g *growth) suspectCycles() int {
	if g.sus == 0 {
		return DefaultSuspectCycles
	}
	return int(g.sus)
}

// setSuspectCycles sets the watcher's threshold, n, learnt from a read.
// Observations made by registrations before the first read counted by
// DefaultSuspectCycles; if n differs, they are dropped.
func (g *growth) setSuspectCycles(n int) {
	if int(g.sus) == n {
		return
	}
	if g.suspectCycles() != n {
		*g = growth{}
	}
	g.sus = uint8(n)
}

// streak is a site's current run of new highs: the ledger cycles of its
// first and latest. A run ends when a window of observations passes with
// no new high; the next new high begins another. With a suspect age
// (epoch.go), a site is classed growing by its new highs only once they
// have gone on for that long: from the start of cycle from to that of
// cycle high.
type streak struct{ from, high uint32 }

// observe records the suspect count of the entry in GC cycle cur, unless
// the entry was already observed in that cycle (or a later one, for a
// path that loaded an older clock), and the entry's run of new highs in
// st.
func (g *growth) observe(cur uint32, suspect uint64, st *streak) {
	if g.flags&growthSeen != 0 && cur-g.last-1 >= 1<<31 { // cur <= last, with wrap-around
		return
	}
	g.flags |= growthSeen
	g.last = cur
	g.i = (g.i + 1) % GrowthWindow
	bit := uint8(1) << g.i
	g.flags &^= bit
	n := uint32(min(suspect, math.MaxUint32))
	var gain uint32
	switch {
	case n > g.peak:
		gain = n - g.peak
		g.peak = n
		if g.flags&highsMask == 0 { // no new high in the window: a new run
			st.from = cur
		}
		st.high = cur
		g.flags |= bit
	case n > g.prev:
		gain = n - g.prev
	}
	if n > g.prev {
		g.run = uint8(min(int(g.run)+1, math.MaxUint8))
	} else {
		g.run = 0
	}
	g.prev = n
	g.gains[g.i] = gain
}

// classify returns the entry's class given its current suspect count, and
// its growth: the suspects gained over the window, in new highs, or in
// every rise while the count has risen GrowthRun times in a row.
func (g *growth) classify(suspect uint64) (Class, uint64) {
	highs := 0
	var inHighs, all uint64
	for i, x := range g.gains {
		all += uint64(x)
		if g.flags&(1<<i) != 0 {
			highs++
			inHighs += uint64(x)
		}
	}
	rising := g.run >= GrowthRun
	grown := inHighs
	if rising {
		grown = all
	}
	switch {
	case suspect == 0:
		return ClassChurn, grown
	case highs >= GrowthHighs || rising:
		return ClassGrowing, grown
	}
	return ClassStable, grown
}

// moreCyclesNeeded returns how many more of its cycles the watcher must
// count before the growth model can tell a leak from a cache at every
// site: a registration becomes a suspect after SuspectCycles cycles (and,
// with a suspect age, once it is that old: more cycles while younger
// cycles are short, epoch.go), and a site needs GrowthWindow observations
// of its suspects after that. It counts from the watcher's first
// registration, by the slower of its two clocks, and is 0 once enough
// cycles have passed. Until a suspect age has passed it is at least
// GrowthWindow (see moreTimeNeeded). A site first seen later needs as many
// cycles of its own.
func (w *Watcher) moreCyclesNeeded() int {
	more := 0
	for _, k := range Kinds {
		need := uint64(w.suspectAgeOf(k) + GrowthWindow)
		if w.suspectAge() > 0 && !w.epochs[k].aged.Load() {
			need = uint64(w.cfg.suspectCycles + GrowthWindow)
			more = max(more, GrowthWindow)
		}
		if c := w.cycleCount(k); c < need {
			more = max(more, int(need-c))
		}
	}
	return more
}

// moreTime returns how much longer, at least, the watcher must run before
// a registration can be a suspect by its suspect age (0 once one can, or
// without one).
func (w *Watcher) moreTime() time.Duration {
	now := w.cfg.now()
	return max(w.moreTimeNeeded(KindFinalizer, now), w.moreTimeNeeded(KindCleanup, now))
}
