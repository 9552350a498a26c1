package finalizerwatch

import (
	"cmp"
	"slices"

	"github.com/gcprobe/probe/stackcapture"
)

// Histogram is a snapshot of a fixed-bucket histogram.
type Histogram struct {
	Bounds []float64 // upper bounds in seconds, shared: do not modify
	Counts []uint64  // per bucket (not cumulative); the last is above every bound
	Count  uint64
	Sum    float64 // seconds
}

// Counts are the ledger's counters, of one site or summed over many: the
// one list of them. SiteStats, Totals and Entry carry them, and the ledger
// reads, sums and merges them as a whole (Add), so a counter added here
// reaches every site, entry and total of a Snapshot.
type Counts struct {
	Registered uint64 // every registration, exactly
	Executed   uint64 // finalizers or cleanups that ran to completion
	Cleared    uint64 // SetFinalizer(obj, nil) or Cleanup.Stop before running
	// ClearedOutside counts, of Cleared, the finalizers that were found
	// cleared or replaced outside finalizerwatch (runtime.SetFinalizer
	// called directly) when their object's address was registered again.
	// Until then such a registration counts as outstanding.
	ClearedOutside uint64
	// Dropped counts, of Executed, the finalizers and cleanups of a
	// Resource that runs only for an object dropped without Close (files,
	// network connections, os.Root, os.Process): each one a descriptor or
	// handle the program left to the garbage collector. Runtime build
	// mode only.
	Dropped     uint64
	Outstanding uint64 // Registered - Executed - Cleared
}

// Add adds o to c, counter by counter.
func (c *Counts) Add(o Counts) {
	c.Registered += o.Registered
	c.Executed += o.Executed
	c.Cleared += o.Cleared
	c.ClearedOutside += o.ClearedOutside
	c.Dropped += o.Dropped
	c.Outstanding += o.Outstanding
}

// SiteStats is the ledger of one call site (or, from Stacks, of one
// registration stack).
type SiteStats struct {
	Kind Kind
	// Site is the call site: the first frame of the registration stack
	// outside the runtime and gcprobe. Its String is the site label.
	Site stackcapture.Frame
	// Stack is the registration stack, innermost first: with full stacks,
	// the stack of these registrations; otherwise the stack of the site's
	// first registration. PCs are its program counters.
	Stack []stackcapture.Frame
	PCs   []uintptr

	// Counts are the site's counters: Registered, Executed, Cleared,
	// ClearedOutside, Dropped, Outstanding.
	Counts
	// Resource is, in the runtime build mode, what the standard library
	// registered at this site ("os.File", "net.Conn"; see Resource), empty
	// for a registration made by the site itself.
	Resource string
	// Survived[i] counts outstanding registrations that have survived i GC
	// cycles; the last bucket counts AgeBuckets-1 cycles or more.
	Survived [AgeBuckets]uint64
	// Suspect counts outstanding registrations that survived at least the
	// watcher's SuspectCycles.
	Suspect uint64
	// Duration is the run time of the finalizers or cleanups, estimated
	// from one run in DurationSampleRate: its counts and sum are scaled by
	// the rate (multiples of it), unbiased but not exact.
	Duration Histogram
	// Class is what the growth model makes of the site: growing (a leak,
	// or a cache still filling), stable (long-lived but flat: a cache or a
	// pool) or churn (no suspects). See Top.
	Class Class
	// Growth is how many suspects the site gained, in new highs of its
	// suspect count (or in every rise, while the count has risen
	// GrowthRun observations in a row), over its last GrowthWindow
	// observations: what Top ranks growing sites by.
	Growth uint64
}

// Overflow says how much the watcher's bounded tables refused.
type Overflow struct {
	Sites  uint64 // registrations counted under the overflow site for want of room
	Stacks uint64 // stacks not kept for want of room
}

// Overflow returns the counts of refusals by the bounded tables.
func (w *Watcher) Overflow() Overflow {
	w.init()
	return w.overflowNow()
}

func (w *Watcher) overflowNow() Overflow {
	return Overflow{
		Sites:  w.overflow[KindFinalizer].counts().Registered + w.overflow[KindCleanup].counts().Registered,
		Stacks: w.stacks.Overflowed() + w.stacksRefused.Load(),
	}
}

// Stacks returns the ledger as it is kept: one entry per call site, or per
// registration stack with WithFullStacks, plus an overflow entry per kind
// that has one. The order is unspecified.
func (w *Watcher) Stacks() []SiteStats { return w.entries(true) }

func (w *Watcher) entries(withStacks bool) []SiteStats {
	w.init()
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

// Sites returns one SiteStats per kind and call site, merging the entries
// of registration stacks that share a site. The order is unspecified.
func (w *Watcher) Sites() []SiteStats { return mergeSites(w.entries(true)) }

// SiteCounts is Sites without the registration stacks: Stack and PCs are
// nil, and only each site's own frame is symbolized. It is what an
// exporter that labels series by site needs, at a fraction of the cost
// and memory of symbolizing every stack.
func (w *Watcher) SiteCounts() []SiteStats { return mergeSites(w.entries(false)) }

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

func (a *SiteStats) merge(b *SiteStats) {
	a.Counts.Add(b.Counts)
	a.Suspect += b.Suspect
	for i := range a.Survived {
		a.Survived[i] += b.Survived[i]
	}
	// In place: a's Counts are its own, of durBuckets counts; b's may be
	// empty.
	for i := range b.Duration.Counts {
		a.Duration.Counts[i] += b.Duration.Counts[i]
	}
	a.Duration.Count += b.Duration.Count
	a.Duration.Sum += b.Duration.Sum
	// Each entry has a model of its own (with full stacks, one per stack
	// into the site): the site grows if any of its entries does.
	a.Class = max(a.Class, b.Class)
	a.Growth += b.Growth
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

// Top returns the n sites most likely to leak, most likely first (all
// sites if n is 0 or more than there are).
//
// The ranking is by the growth model. An entry is observed once in each GC
// cycle in which it registers (the cycle's first registration counts its
// suspects, under the lock it already takes to fold the age ring) or is
// read (a ranking, Top, Sites, SiteCounts, Stacks, Totals): its suspect count, the
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
func (w *Watcher) Top(n int) []SiteStats {
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
	slices.SortFunc(sites, func(a, b SiteStats) int { return CompareRank(&a, &b) })
	if n > 0 && n < len(sites) {
		sites = sites[:n]
	}
	return sites
}

// CompareRank is Top's order: negative when a ranks before b (is more
// likely to leak). Growing sites first, then stable, then churn; among
// growing sites, by Growth; then by suspects, outstanding and
// registrations, all descending; then kind, function, file and line,
// ascending, so that the order is total and the same on every call. It
// allocates nothing, for callers that select a top K themselves without
// sorting everything.
func CompareRank(a, b *SiteStats) int {
	ka := rankKey{a.Class, a.Growth, a.Suspect, a.Outstanding, a.Registered, a.Kind, &a.Site}
	kb := rankKey{b.Class, b.Growth, b.Suspect, b.Outstanding, b.Registered, b.Kind, &b.Site}
	return compareKeys(&ka, &kb)
}

// rankKey is what the ranking orders by: CompareRank's and the per-cycle
// ranking's one order.
type rankKey struct {
	class                                    Class
	growth, suspect, outstanding, registered uint64
	kind                                     Kind
	site                                     *stackcapture.Frame
}

func compareKeys(a, b *rankKey) int {
	if c := cmp.Compare(b.class, a.class); c != 0 {
		return c
	}
	if a.class == ClassGrowing {
		if c := cmp.Compare(b.growth, a.growth); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(b.suspect, a.suspect); c != 0 {
		return c
	}
	if c := cmp.Compare(b.outstanding, a.outstanding); c != 0 {
		return c
	}
	if c := cmp.Compare(b.registered, a.registered); c != 0 {
		return c
	}
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.site.Function, b.site.Function); c != 0 {
		return c
	}
	if c := cmp.Compare(a.site.File, b.site.File); c != 0 {
		return c
	}
	return cmp.Compare(a.site.Line, b.site.Line)
}

// Totals is a ledger summed over every site of one kind.
type Totals struct {
	Kind  Kind
	Sites int
	Counts
	Suspect uint64
}

// Totals returns the ledger of kind k summed over all its sites. It is a
// thin wrapper over Read with Fresh: every count exact now, O(ledger).
// Exporters that read totals on each scrape use Read, whose totals cost
// O(K).
func (w *Watcher) Totals(k Kind) Totals {
	if k >= numKinds {
		return Totals{Kind: k}
	}
	var sn Snapshot
	w.Read(&sn, ReadOptions{Fresh: true})
	return sn.Kinds[k].Totals
}
