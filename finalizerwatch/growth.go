package finalizerwatch

// The growth model: which sites leak.
//
// Once per GC cycle in which a site's ledger entry registers or is read
// (an observation), its suspect count is compared with the highest the
// entry has had before; a site is growing when that count reached a new
// high in at least GrowthHighs of its last GrowthWindow observations,
// stable when it has suspects but is not growing, and churn when it has
// none. Growing sites rank first, by how much their suspects rose over
// those observations (Growth).
//
// The state is 32 bytes per ledger entry, updated under the entry's
// age-ring lock by the paths that already take it: the first registration
// of each cycle (which folds the ring) and reads. A registration otherwise
// costs what it did: one atomic load and compare, one atomic add.

import "math"

const (
	// GrowthWindow is how many of a site's latest observations (one per GC
	// cycle in which the site registers or is read) the growth model
	// looks at.
	GrowthWindow = 4
	// GrowthHighs is how many of those observations must find a new high
	// of the site's suspect count for the site to be classed growing.
	GrowthHighs = 2
)

// Class is what the growth model makes of a site.
type Class uint8

// The classes, in increasing order of concern: CompareRank ranks a higher
// class first.
const (
	// ClassChurn: nothing outstanding at the site has survived
	// SuspectCycles GC cycles; what it registers is collected within a
	// few cycles.
	ClassChurn Class = iota
	// ClassStable: the site has suspects, long-lived registrations, but
	// their count is not growing: a cache or a pool.
	ClassStable
	// ClassGrowing: the site's suspect count keeps reaching new highs: a
	// leak, or a cache that is still filling.
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
// ageRing's mu: 32 bytes.
type growth struct {
	last uint32 // GC cycle of the latest observation
	i    uint8  // index in gains of the latest observation
	any  bool   // observed at least once
	// sus is the SuspectCycles the observations count suspects by: the
	// watcher's, learnt at the entry's first read; 0 before that, when
	// registrations observe by DefaultSuspectCycles.
	sus  uint8
	peak uint64 // the highest suspect count observed
	// gains[i] is by how much observation i raised peak (0: no new high),
	// saturating.
	gains [GrowthWindow]uint32
}

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

// observe records the suspect count of the entry in GC cycle cur, unless
// the entry was already observed in that cycle (or a later one, for a
// path that loaded an older clock).
func (g *growth) observe(cur uint32, suspect uint64) {
	if g.any && cur-g.last-1 >= 1<<31 { // cur <= last, with wrap-around
		return
	}
	g.any = true
	g.last = cur
	g.i = (g.i + 1) % GrowthWindow
	var gain uint32
	if suspect > g.peak {
		gain = uint32(min(suspect-g.peak, math.MaxUint32))
		g.peak = suspect
	}
	g.gains[g.i] = gain
}

// classify returns the entry's class given its current suspect count, and
// its growth: the suspects gained in new highs over the window.
func (g *growth) classify(suspect uint64) (Class, uint64) {
	highs := 0
	var sum uint64
	for _, x := range g.gains {
		if x > 0 {
			highs++
			sum += uint64(x)
		}
	}
	switch {
	case suspect == 0:
		return ClassChurn, sum
	case highs >= GrowthHighs:
		return ClassGrowing, sum
	}
	return ClassStable, sum
}

// MoreCyclesNeeded returns how many more GC cycles must pass before the
// growth model can tell a leak from a cache at every site: a registration
// becomes a suspect after SuspectCycles cycles, and a site needs
// GrowthWindow observations of its suspects after that. It counts from the
// watcher's first registration, by the slower of its two GC clocks, and
// is 0 once enough cycles have passed. A site first seen later needs as
// many cycles of its own.
func (w *Watcher) MoreCyclesNeeded() int {
	need := uint64(w.cfg.suspectCycles + GrowthWindow)
	c := min(w.Cycles(KindFinalizer), w.Cycles(KindCleanup))
	if c >= need {
		return 0
	}
	return int(need - c)
}
