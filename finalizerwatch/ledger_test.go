package finalizerwatch

import (
	"slices"

	"github.com/gcprobe/probe/stackcapture"
)

// What the tests read beside Read: every ledger entry or site as
// SiteStats, sorted or summed, computed directly from the entries (an
// independent path to check Read's snapshot against). Retired from the
// package's API: consumers read the Snapshot.

// entryList returns the ledger as it is kept: one entry per call site, or per
// registration stack with WithFullStacks, plus an overflow entry per kind
// that has one. The order is unspecified.
func (w *Watcher) entryList() []SiteStats { return w.entries(true) }

func (w *Watcher) entries(withStacks bool) []SiteStats {
	w.init()
	rtSettle() // as Read: the runtime build mode's counts on the P first
	n := w.sites.Len() + len(w.overflow)
	out := make([]SiteStats, 0, n)
	// One backing array for every entry's histogram counts, rather than
	// an allocation per entry. Entries inserted while this runs may
	// outgrow it; they get arrays of their own.
	counts := make([]uint64, n*durBuckets)
	next := func() []uint64 {
		if len(counts) < durBuckets {
			return make([]uint64, durBuckets)
		}
		c := counts[:durBuckets:durBuckets]
		counts = counts[durBuckets:]
		return c
	}
	w.sites.Range(func(_ siteKey, s *site) bool {
		if !s.indirect {
			out = append(out, w.stats(s, withStacks, next()))
		}
		return true
	})
	for k := range w.overflow {
		if w.overflow[k].used() {
			out = append(out, w.stats(&w.overflow[k], withStacks, next()))
		}
	}
	return out
}

// siteList returns one SiteStats per kind and call site, merging the entries
// of registration stacks that share a site. The order is unspecified.
func (w *Watcher) siteList() []SiteStats { return mergeSites(w.entries(true)) }

// mergeSites merges entries that share a kind and site. Entries can share
// a site even without full stacks: a line inlined into two callers has two
// return PCs.
func mergeSites(all []SiteStats) []SiteStats {
	type key struct {
		kind Kind
		site stackcapture.Frame
	}
	idx := make(map[key]int, len(all))
	out := all[:0]
	for _, s := range all {
		k := key{s.Kind, stackcapture.Frame{Function: s.Site.Function, File: s.Site.File, Line: s.Site.Line}}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, s)
			continue
		}
		out[i].merge(&s)
	}
	return out
}

// stats reads one entry. Executed and cleared are loaded before registered,
// so that Outstanding never underflows: every run counted was registered
// first.
func (w *Watcher) stats(s *site, withStack bool, counts []uint64) SiteStats {
	c := s.counts()
	st := SiteStats{
		Kind:     s.kind,
		Site:     s.siteFrame(),
		Counts:   c,
		Resource: resourceOf(s.res).Name,
		Duration: s.dur.snapshot(counts),
	}
	switch {
	case !withStack:
	case s.stack != nil:
		st.Stack = s.stack.Frames()
		st.PCs = s.stack.PCs()
	default:
		st.Stack = []stackcapture.Frame{st.Site}
	}
	st.Suspect, st.Class, st.Growth = s.read(w.cycles[s.kind].Load(), w.cfg.suspectCycles, &st.Survived)
	return st
}

// top returns the n sites most likely to leak, most likely first (all
// sites if n is 0 or more than there are).
//
// The ranking is by the growth model. An entry is observed once in each GC
// cycle in which it registers (the cycle's first registration counts its
// suspects, under the lock it already takes to fold the age ring) or is
// read (a ranking): its suspect count, the
// outstanding registrations that survived at least SuspectCycles cycles, is
// compared with the highest it has had and with the previous
// observation's. A site is growing when its suspect count reached a new
// high in at least GrowthHighs of its last GrowthWindow observations, or
// rose in each of its last GrowthRun observations (however far below an
// earlier high), stable when it has suspects but is not growing, and churn
// when it has none. Growing sites rank first, by Growth
// (the suspects they gained over those observations), then stable sites by
// suspects, then churn by outstanding registrations; see CompareRank.
//
// So a leak registering from the first cycle on is classed growing in
// cycle SuspectCycles+1 (its second new high) and ranks above every stable
// site, whatever their size, however slowly it leaks; registrations
// collected within a few cycles never make suspects, however many there
// are. A leak whose count first fell below an earlier high is classed
// growing after GrowthRun observations of rises. A cache or a burst that
// stops growing is classed stable once fewer than GrowthHighs of the last
// GrowthWindow observations found a new high: GrowthWindow-GrowthHighs
// observations after its last new high. A site that no
// longer registers is observed by rankings and reads only: with
// RankEachCycle running, once per GC cycle; with reads rarer than GC
// cycles (a scrape every 30 s), that takes that many reads. A watcher with a
// SuspectCycles other than the default learns it at an entry's first read,
// and the entry's observations start there.
func (w *Watcher) top(n int) []SiteStats {
	if n < 0 {
		panic("finalizerwatch.Top: negative n")
	}
	// A thin wrapper over Read: a fresh ranking (every count exact now),
	// the top n of each kind, which together hold the top n of both.
	k := n
	if k == 0 {
		k = -1
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{TopK: k, Stacks: true, Fresh: true})
	sites := append(sn.Kinds[KindFinalizer].Top, sn.Kinds[KindCleanup].Top...)
	slices.SortFunc(sites, func(a, b SiteStats) int { return compareRank(&a, &b) })
	if n > 0 && n < len(sites) {
		sites = sites[:n]
	}
	return sites
}

// compareRank is top's order: negative when a ranks before b (is more
// likely to leak). Growing sites first, then stable, then churn; among
// growing sites, by Growth (within a class, a site of accepted
// connections after the others); then by suspects, outstanding and
// registrations, all descending; then kind, function, file and line,
// ascending, so that the order is total and the same on every call. It
// allocates nothing, for callers that select a top K themselves without
// sorting everything.
func compareRank(a, b *SiteStats) int {
	ka := rankKey{a.Class, a.Accepted, a.Dropped > 0, a.Growth, a.Suspect, a.Outstanding, a.Registered, a.Kind, &a.Site}
	kb := rankKey{b.Class, b.Accepted, b.Dropped > 0, b.Growth, b.Suspect, b.Outstanding, b.Registered, b.Kind, &b.Site}
	return compareKeys(&ka, &kb)
}

// totals returns the ledger of kind k summed over all its sites. It is a
// thin wrapper over Read with Fresh: every count exact now, O(ledger).
// Exporters that read totals on each scrape use Read, whose totals cost
// O(K).
func (w *Watcher) totals(k Kind) Totals {
	if k >= numKinds {
		return Totals{Kind: k}
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{Fresh: true})
	return sn.Kinds[k].Totals
}

// stackSamples returns the sampled stacks of kind k, in no particular
// order, with counts scaled by the sample rate. It is empty if sampling is
// off (and was never on) or with WithFullStacks, where every stack is kept
// exactly (see entryList).
func (w *Watcher) stackSamples(k Kind) []StackSample {
	w.init()
	return w.appendStackSamples(nil, k)
}

// runningNow returns the watched finalizers and cleanups running now, one per
// site (where several cleanups of a site run at once, the one that started
// first), the longest running first. Its cost does not depend on the size
// of the ledger: it reads a few slots per kind. Where more cleanups run at
// once than it has slots for (16; the runtime runs at most GOMAXPROCS/4),
// the later ones are not listed.
func (w *Watcher) runningNow() []RunningCallback { return w.appendRunning(nil) }
