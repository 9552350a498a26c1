package finalizerwatch

// The growth model: which sites leak.
//
// Each time a site's ledger entry is read in a GC cycle it was not yet read
// in (an observation), its suspect count is compared with the highest the
// entry has had before; a site is growing when that count reached a new
// high in at least GrowthHighs of its last GrowthWindow observations,
// stable when it has suspects but is not growing, and churn when it has
// none. Growing sites rank first, by how much their suspects rose over
// those observations (Growth).
//
// Nothing of this runs on the registration or execution paths: the state
// is a few words per ledger entry, updated under the entry's age-ring lock
// by the read that already takes it, at most once per entry and GC cycle.

import "math"

const (
	// GrowthWindow is how many of a site's latest observations (reads of
	// the ledger in distinct GC cycles) the growth model looks at.
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
// ageRing's mu.
type growth struct {
	n    uint32 // observations so far, saturating
	last uint32 // GC cycle of the latest observation
	peak uint64 // the highest suspect count observed
	// gains[i%GrowthWindow] is by how much observation i raised peak (0:
	// no new high), saturating: 32 bits keep the state at 32 bytes per
	// ledger entry.
	gains [GrowthWindow]uint32
}

// observe records the suspect count of the entry in GC cycle cur, unless
// the entry was already observed in that cycle (or a later one, for a
// reader that loaded an older clock).
func (g *growth) observe(cur uint32, suspect uint64) {
	if g.n > 0 && cur-g.last-1 >= 1<<31 { // cur <= last, with wrap-around
		return
	}
	if g.n < math.MaxUint32 {
		g.n++
	}
	g.last = cur
	var gain uint32
	if suspect > g.peak {
		gain = uint32(min(suspect-g.peak, math.MaxUint32))
		g.peak = suspect
	}
	g.gains[g.n%GrowthWindow] = gain
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
