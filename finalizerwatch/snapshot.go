package finalizerwatch

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// The read API: one Snapshot, filled by Read, serves every exporter.
//
// Ranking every site on every read costs O(ledger) per scrape, with the
// ledger's sites spread over the heap: at 10 000 sites, milliseconds. Yet
// the ranking hardly moves between GC cycles: a site's class and growth
// change only when it is observed (once per cycle), its suspects only go
// down within a cycle (registrations made in it are 0 cycles old). So the
// watcher ranks once per GC cycle (Rank, or the first Read of a cycle) and
// keeps, per kind, the top K sites and the counters of every other site
// summed. A Read then costs O(K): the live counters of the K sites, the
// sums of the others as of the ranking, and the overflow counters.
//
// A top site can be many ledger entries (with full stacks, one per stack
// into it), so a Read reads live the counters of at most liveEntries of
// each top site's entries; the rest of its entries, and every count that
// comes from the age rings (Survived, Suspect, Class, Growth), are taken
// from the ranking, which read them in the same pass that ranked. Those
// ring counts move only when a GC cycle ends (a registration is 0 cycles
// old until then) or when a suspect object's callback runs or is cleared,
// and reading them takes each entry's ring lock: that is the work that
// belongs once per cycle, not once per scrape.

// DefaultTopK is the default of every option that sets a ReadOptions.TopK
// for a reader: promexporter.WithTopK, tracing.WithTopK and the probe's
// WithTopK. Their DefaultTopK constants are this one under their own
// names. (heapprofile's top lists are of heap-profile sites, not of the
// ledger's: its WithTopK and DefaultTopK are its own; see its
// documentation.)
const DefaultTopK = 10

// CheckTopK is the one limit of every option that sets a reader's top K
// (promexporter.WithTopK, tracing.WithTopK, the probe's WithTopK): k must
// be at least 1, since a reader asks Read for its top sites to show them.
// (ReadOptions.TopK itself also takes 0, none, and a negative value,
// every site.) It returns nil for a k an option may set, else an error
// naming the option and the problem, "WithTopK: must be >= 1, got 0",
// which each package prefixes with its own name.
func CheckTopK(k int) error {
	if k < 1 {
		return fmt.Errorf("WithTopK: must be >= 1, got %d", k)
	}
	return nil
}

// ReadOptions say what Read puts in a Snapshot.
type ReadOptions struct {
	// TopK is how many sites Snapshot.Top holds: the K sites most likely
	// to leak by the growth model, of either kind, best first; 0 for none.
	// Negative means every site. This is the one meaning of "top K" in
	// gcprobe, and Read the one place that cuts the ranking to K: the
	// Prometheus exporter's site series, the Report, the leak-report spans
	// and the live page all show the Top this Read returns, as it is.
	// DefaultTopK is the readers' default, CheckTopK their options' limit.
	TopK int
	// Stacks fills Stack and PCs of the Top sites (symbolized once per
	// stack, then cached).
	Stacks bool
	// Fresh ranks anew at this instant, reading every ledger entry
	// (O(ledger)), rather than reusing the ranking of the current GC cycle:
	// then every count in the snapshot is exact, not only the top K's.
	Fresh bool
	// Entries fills Snapshot.Entries with every ledger entry (O(ledger),
	// nothing symbolized): what a profile of every registration stack
	// needs.
	Entries bool
	// Unranked does not rank when the ranking is merely out of date:
	// Kinds and RankCycles come from the latest ranking, whatever its
	// cycle. It ranks only when there is none to reuse (no ranking yet,
	// or the latest was a Fresh read's). For a reader that uses only
	// Entries, so that it does not pay once per GC cycle for a ranking it
	// ignores. Fresh overrides it.
	Unranked bool
	// StackSamples fills Snapshot.StackSamples with every sampled stack
	// (O(sampled stacks), symbolized): what the sampled-stacks profile
	// reads.
	StackSamples bool
}

// Snapshot is one read of a Watcher's ledger. Read fills it, reusing its
// slices: a caller that reads into the same Snapshot again allocates
// nothing in the steady state, and must not keep slices of an earlier read.
//
// What reads it: the Prometheus exporter (Top, Kinds' Totals, Other and
// Duration, Overflow, Running), the pprof profiles (Entries,
// StackSamples), the probe's Report, live page and growing-site log
// (Top with stacks, Totals, Running, MoreCyclesNeeded), the leak-report
// spans (Top, Cycles, MoreCyclesNeeded) and finalizertest (every site,
// Fresh). None of them ranks, merges or recounts: the order and the sums
// are the snapshot's. The exporter's per-site series, the profile's sample
// types, the Report's columns and the spans' counts are made from
// Counters, so a counter added to Counts reaches each of them.
type Snapshot struct {
	// Top are the best-ranked sites of both kinds (at most
	// ReadOptions.TopK), best first, in the order of the ranking (see
	// "What counts as a leak" in the package documentation). Their Registered, Executed, Cleared, ClearedOutside,
	// Dropped, Outstanding and Duration are read live over the site's
	// first few ledger entries (all of them, unless full stacks give the
	// site many) plus, for the others, as of the ranking; Survived,
	// Suspect, Class and Growth are as of the ranking (Suspect capped at
	// the live Outstanding). With Fresh, the ranking is made by this Read,
	// so every count is exact now.
	Top []SiteStats
	// Kinds holds each kind's part, indexed by Kind.
	Kinds [len(Kinds)]KindSnapshot
	// Overflow counts what the bounded tables refused, read live.
	Overflow Overflow
	// Running are the watched finalizers and cleanups running now, one per
	// site, the longest running first (see RunningCallback), read live.
	Running []RunningCallback
	// Cycles are the watcher's GC cycles of each kind, read live: the
	// cycles the ledger has counted (a cycle counts once the goroutine
	// that runs that kind of callback has caught up with it).
	Cycles [len(Kinds)]uint64
	// RankCycles are the Cycles at the ranking the snapshot is based on.
	RankCycles [len(Kinds)]uint64
	// MoreCyclesNeeded is how many more GC cycles the growth model needs
	// before its classes can be trusted: SuspectCycles+GrowthWindow in
	// all, 0 from then on.
	MoreCyclesNeeded int
	// MoreTimeNeeded is how much longer, at least, the watcher must run
	// before a registration can be a suspect by its suspect age
	// (WithSuspectAge): 0 once one can, or without one. Until both it and
	// MoreCyclesNeeded are 0, it is too early to tell a leak from a cache.
	MoreTimeNeeded time.Duration
	// Entries are every ledger entry, if ReadOptions.Entries asked for
	// them; the order is unspecified.
	Entries []Entry
	// StackSamples are the sampled stacks of both kinds, if
	// ReadOptions.StackSamples asked for them, in no particular order, with
	// counts scaled by the sample rate. Empty if sampling is off (and was
	// never on) or with full stacks, where every stack is an entry.
	StackSamples []StackSample
}

// KindSnapshot is the part of a Snapshot about one kind.
type KindSnapshot struct {
	// Totals is the ledger summed over every site of the kind, the
	// overflow entry included: Other plus every Top site.
	Totals
	// Duration is the run-time histogram summed over every site.
	Duration Histogram
	// Growing is how many sites of the kind the growth model classes
	// growing.
	Growing int
	// Ranked is how many sites (ledger entries merged by site, the
	// overflow entry included) the ranking considered; Tracked is how many
	// of them are not the overflow entry.
	Ranked, Tracked int
	// Top are the sites of Snapshot.Top of this kind, in its order.
	Top []SiteStats
	// Other is every site of the kind outside Snapshot.Top summed (Site is zero, Class the
	// highest class among them, Growth and Suspect summed). Without Fresh,
	// its counts are those of the ranking, read once in the current GC
	// cycle (or when the ledger last gained an entry).
	Other SiteStats
}

// Entry is one ledger entry as ReadOptions.Entries reports it: its
// registration stack's program counters, unsymbolized.
type Entry struct {
	Kind Kind
	// PCs are the registration stack's return program counters, innermost
	// first (shared: do not modify); nil for an entry that has none (the
	// overflow entry), whose Site then says where it stands.
	PCs  []uintptr
	Site stackcapture.Frame // only when PCs is nil
	// Counts, Suspect, Growth and Class as in SiteStats.
	Counts
	Suspect, Growth uint64
	Class           Class
}

// group is a site: the ledger entries of one kind that share a frame
// (with full stacks, one per stack into it; without, usually one). The
// ranking ranks groups. Groups are never removed, as entries are not.
type group struct {
	frame    *stackcapture.Frame // shared with the head's cached frame where it has one
	head     *site               // its first entry; the others chain through site.next
	nextHash int32               // index of the next group with the same hash, -1 if none
	kind     Kind
	// Pass-1 scratch of the latest ranking (see rankLocked).
	top                                      bool
	class                                    Class
	accepted                                 bool // every entry's resource is Accepted
	dropped                                  bool // an entry dropped a resource without Close
	pass                                     uint32
	growth, suspect, outstanding, registered uint64
	// 60 bytes of fields, in this order 64 with padding (TestGroupSize).
}

// groupChunkLen is how many groups a chunk of a groupStore holds.
const groupChunkLen = 64

// groupStore holds the ranking's groups in chunks that never move: a group
// keeps its address, and the store grows by a chunk at a time, where a
// growing slice leaves up to a quarter of itself unused and is copied at
// each growth (at 10 000 sites, the 64-byte groups and the chunks together
// took 0.04 MB off the heap).
type groupStore struct {
	chunks []*[groupChunkLen]group
	n      int32
}

// at returns group gi.
func (st *groupStore) at(gi int32) *group { return &st.chunks[gi/groupChunkLen][gi%groupChunkLen] }

// add appends g and returns its index.
func (st *groupStore) add(g group) int32 {
	gi := st.n
	if int(gi) == len(st.chunks)*groupChunkLen {
		st.chunks = append(st.chunks, new([groupChunkLen]group))
	}
	st.n++
	*st.at(gi) = g
	return gi
}

func (g *group) key() rankKey {
	return rankKey{g.class, g.accepted, g.dropped, g.growth, g.suspect, g.outstanding, g.registered, g.kind, g.frame}
}

// ranking is a Watcher's per-cycle ranking, guarded by mu.
type ranking struct {
	groups groupStore
	byHash map[uint64]int32
	seed   maphash.Seed

	pass  uint32
	valid bool
	// What the ranking was made for: the clocks, the ledger's size, and
	// K. A read finding any of these moved ranks again.
	cycles  [len(Kinds)]uint32
	entries int
	ovf     [len(Kinds)]bool
	k       int

	seen [len(Kinds)][]int32 // groups of each kind met in this pass
	top  [len(Kinds)][]int32 // the top k of each kind, best first
	// order is the last Read's top sites' kinds, in rank order (scratch).
	order []Kind
	tops  [len(Kinds)][]topSums
	rest  [len(Kinds)]restSums
	// counts is the Duration.Counts backing of rest.
	counts [len(Kinds)][durBuckets]uint64

	// ranked, if set (by tests), is called after each ranking that
	// RankEachCycle makes; betweenPasses, between a ranking's two passes
	// over the ledger.
	ranked, betweenPasses func()
}

// liveEntries bounds how many ledger entries of each top site a Read
// reads live; the others count as of the ranking. Without full stacks a
// site is almost always one entry (two for a line inlined into two
// callers); with them, one per stack into the site, which can be
// thousands for a leak reached through many paths.
const liveEntries = 8

// topSums is what the ranking keeps of a top site beyond its pass-1 keys:
// its age buckets over every entry, and the counters of the entries past
// the first liveEntries, which a Read does not read live.
type topSums struct {
	counterSums
	survived [AgeBuckets]uint64
	dur      [durBuckets]uint64
}

// counterSums sums ledger entries' counters and run-time histograms.
type counterSums struct {
	Counts
	durCount, durSumNs uint64
}

// add adds entry e's counters to c, and its histogram's counts to dur,
// and returns e's counters.
func (c *counterSums) add(e *site, dur *[durBuckets]uint64) Counts {
	ec := e.counts()
	c.Counts.Add(ec)
	n, sumNs := e.dur.addTo(dur)
	c.durCount += n
	c.durSumNs += sumNs
	return ec
}

// namesBetter reports whether an entry with counts a names its line's
// resource better than one with counts b: a line's entries are kept apart
// by the type they registered (net.Listen's line also opens, and closes,
// a file the first time: net's somaxconn), and the line is named by what
// was dropped the most, else is outstanding the most, else registered.
func namesBetter(a, b Counts) bool {
	if a.Dropped != b.Dropped {
		return a.Dropped > b.Dropped
	}
	if a.Outstanding != b.Outstanding {
		return a.Outstanding > b.Outstanding
	}
	return a.Registered > b.Registered
}

// restSums are the counts of the sites outside the top k, as of the
// ranking.
type restSums struct {
	counterSums
	entries                  int
	suspect, growth          uint64
	class                    Class
	growing, ranked, tracked int
}

// Rank ranks the ledger now for the current GC cycle, reading every entry
// once (O(ledger)): the once-per-cycle work that lets Read cost O(K).
// RankEachCycle calls it after each GC cycle from a goroutine of the
// caller's (the probe runs one) to keep that work off the scrape path;
// without it, the first Read of each cycle ranks.
func (w *Watcher) Rank() {
	w.init()
	w.rankMu.Lock()
	defer w.rankMu.Unlock()
	rtSettle()
	w.rankLocked(max(w.rank.k, 1))
}

// Read fills dst with a snapshot of the ledger as opts asks: per kind, the
// top K sites with live counts, everything else summed under Other, the
// totals; and the overflow counters. It ranks the ledger only when the
// current ranking is not for the current GC cycle of both kinds, for the
// current number of ledger entries and for at least opts.TopK sites (or
// when opts.Fresh asks); otherwise it reads O(K) entries. See Rank.
//
// Only the ranking observes sites for the growth model: a Read
// that does not rank observes nothing.
func (w *Watcher) Read(dst *Snapshot, opts ReadOptions) {
	w.init()
	w.rankMu.Lock()
	defer w.rankMu.Unlock()
	rtSettle()
	r := &w.rank
	k := opts.TopK
	if k < 0 {
		k = math.MaxInt
	}
	switch {
	case opts.Fresh:
		// A fresh read ranks for its own K; a later cached read (or
		// RankEachCycle) ranks again for the K of the cached reads
		// rather than inheriting, say, every site.
		prev := r.k
		w.rankLocked(k)
		r.valid, r.k = false, prev
	case opts.Unranked && r.valid:
		// A Fresh read leaves the ranking invalid, its per-top sums
		// possibly trimmed: only a valid one is read as it is.
	case !w.rankCurrent(k):
		w.rankLocked(max(k, r.k))
	}
	// The top k of both kinds: the first k of the two kinds' top lists
	// merged in rank order.
	var kk [len(Kinds)]int
	order := r.order[:0]
	for len(order) < k {
		f, c := kk[KindFinalizer], kk[KindCleanup]
		hasF, hasC := f < len(r.top[KindFinalizer]), c < len(r.top[KindCleanup])
		switch {
		case hasF && (!hasC || w.rankBefore(r.top[KindFinalizer][f], r.top[KindCleanup][c])):
			order = append(order, KindFinalizer)
		case hasC:
			order = append(order, KindCleanup)
		}
		if !hasF && !hasC {
			break
		}
		kk[order[len(order)-1]]++
	}
	r.order = order
	for kind := range dst.Kinds {
		w.readKind(&dst.Kinds[kind], Kind(kind), kk[kind], opts.Stacks)
		dst.RankCycles[kind] = uint64(r.cycles[kind])
		dst.Cycles[kind] = uint64(w.cycle(Kind(kind)))
	}
	dst.Top = slices.Grow(dst.Top[:0], len(order))[:len(order)]
	kk = [len(Kinds)]int{}
	for i, kind := range order {
		dst.Top[i] = dst.Kinds[kind].Top[kk[kind]]
		kk[kind]++
	}
	if opts.Fresh {
		r.trimTops()
	}
	dst.Overflow = w.overflowNow()
	dst.Running = w.appendRunning(dst.Running[:0])
	dst.MoreCyclesNeeded = w.moreCyclesNeeded()
	dst.MoreTimeNeeded = w.moreTime()
	dst.Entries = dst.Entries[:0]
	if opts.Entries {
		dst.Entries = w.appendEntries(dst.Entries)
	}
	dst.StackSamples = dst.StackSamples[:0]
	if opts.StackSamples {
		for _, kind := range Kinds {
			dst.StackSamples = w.appendStackSamples(dst.StackSamples, kind)
		}
	}
}

// rankBefore reports whether group a ranks before group b (of another
// kind), as of the ranking.
func (w *Watcher) rankBefore(a, b int32) bool {
	ka, kb := w.rank.groups.at(a).key(), w.rank.groups.at(b).key()
	return compareKeys(&ka, &kb) < 0
}

// trimTops lets go of the per-top sums a fresh read of many sites grew
// (about 300 bytes a site: megabytes for Top(0) of a large ledger), which
// the ranking's own K would keep for good.
func (r *ranking) trimTops() {
	for kind := range r.tops {
		if cap(r.tops[kind]) > 2*r.k+16 {
			r.tops[kind] = nil
		}
	}
}

// rankCurrent reports whether the ranking serves a read of k sites now.
func (w *Watcher) rankCurrent(k int) bool {
	r := &w.rank
	if !r.valid || k > r.k || w.sites.Len() != r.entries {
		return false
	}
	for kind := range r.cycles {
		if w.cycles[kind].Load() != r.cycles[kind] || w.overflow[kind].used() != r.ovf[kind] {
			return false
		}
	}
	return true
}

// rankLocked ranks every entry, in two passes over the ledger: the first
// reads each entry's ranking keys (observing it for the growth model) and
// sums them by site; the top k sites of each kind are then selected; the
// second sums the counters of every entry outside them.
func (w *Watcher) rankLocked(k int) {
	r := &w.rank
	if r.byHash == nil {
		r.byHash = make(map[uint64]int32)
		r.seed = maphash.MakeSeed()
	}
	r.pass++
	r.k = k
	r.entries = w.sites.Len()
	for kind := range r.cycles {
		r.cycles[kind] = w.cycles[kind].Load()
		r.ovf[kind] = w.overflow[kind].used()
		r.seen[kind] = r.seen[kind][:0]
		r.rest[kind] = restSums{}
		clear(r.counts[kind][:])
	}
	// Pass 1: ranking keys, by site.
	each := func(s *site) {
		g := w.groupOf(s)
		gi := s.grp - 1
		if g.pass != r.pass {
			g.pass, g.top = r.pass, false
			g.class, g.growth, g.suspect, g.outstanding, g.registered = ClassChurn, 0, 0, 0, 0
			g.accepted, g.dropped = true, false
			r.seen[g.kind] = append(r.seen[g.kind], gi)
		}
		g.accepted = g.accepted && s.res != 0 && resourceOf(s.res).Accepted
		c := s.counts()
		var survived [AgeBuckets]uint64
		sus, class, growth := s.read(r.cycles[s.kind], w.cfg.suspectCycles, &survived)
		g.class = max(g.class, class)
		g.growth += growth
		g.suspect += sus
		g.registered += c.Registered
		g.outstanding += c.Outstanding
		g.dropped = g.dropped || c.Dropped > 0
	}
	w.eachEntry(each)
	// The top k of each kind.
	for kind := range r.top {
		r.top[kind] = selectTop(&r.groups, r.seen[kind], k, r.top[kind][:0])
		r.tops[kind] = r.tops[kind][:0]
		for i, gi := range r.top[kind] {
			g := r.groups.at(gi)
			g.top = true
			r.tops[kind] = append(r.tops[kind], topSums{})
			w.sumTop(g, &r.tops[kind][i])
		}
		rest := &r.rest[kind]
		for _, gi := range r.seen[kind] {
			g := r.groups.at(gi)
			rest.ranked++
			if g.head != &w.overflow[kind] {
				rest.tracked++
			}
			if g.top {
				continue
			}
			rest.suspect += g.suspect
			rest.growth += g.growth
			rest.class = max(rest.class, g.class)
			if g.class == ClassGrowing {
				rest.growing++
			}
		}
	}
	if r.betweenPasses != nil {
		r.betweenPasses()
	}
	// Pass 2: the counters of the rest. Outstanding is computed from the
	// counters read here, as Read computes it for the top sites. An entry
	// made since pass 1 (registrations go on during a ranking) has no
	// group yet: it is not a top site, so it counts under the rest.
	w.eachEntry(func(s *site) {
		rest := &r.rest[s.kind]
		rest.entries++
		if s.grp != 0 && r.groups.at(s.grp-1).top {
			return
		}
		rest.add(s, &r.counts[s.kind])
	})
	r.valid = true
}

// eachEntry calls f for every ledger entry that counts: the direct ones
// and each overflow entry that has registered.
func (w *Watcher) eachEntry(f func(*site)) {
	w.sites.Range(func(_ siteKey, s *site) bool {
		if !s.indirect {
			f(s)
		}
		return true
	})
	for k := range w.overflow {
		if w.overflow[k].used() {
			f(&w.overflow[k])
		}
	}
}

// groupOf returns s's group, assigning it one on first sight: the group of
// its kind and frame, new if there is none. Under rankMu.
func (w *Watcher) groupOf(s *site) *group {
	r := &w.rank
	if s.grp != 0 {
		return r.groups.at(s.grp - 1)
	}
	f := s.siteFrame()
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(f.Function)
	h.WriteByte(0)
	h.WriteString(f.File)
	h.WriteByte(byte(s.kind))
	maphash.WriteComparable(&h, f.Line)
	sum := h.Sum64()
	first, ok := r.byHash[sum]
	if ok {
		for gi := first; gi >= 0; gi = r.groups.at(gi).nextHash {
			g := r.groups.at(gi)
			if g.kind == s.kind && g.frame.Function == f.Function && g.frame.File == f.File && g.frame.Line == f.Line {
				// Append s to the group's chain, after its head.
				s.next, g.head.next = g.head.next, s
				s.grp = gi + 1
				return g
			}
		}
	} else {
		first = -1
	}
	fp := s.frame.Load()
	if fp == nil || *fp != f {
		fp = &f // a stack's entry: the frame is cached on its stack
	}
	gi := r.groups.add(group{kind: s.kind, frame: fp, head: s, nextHash: first})
	r.byHash[sum] = gi
	s.grp = gi + 1
	return r.groups.at(gi)
}

// selectTop appends to dst the indices, among cands, of the k best-ranked
// groups, best first: a heap of k whose root is the worst of them, so that
// the others are compared once each and never sorted.
func selectTop(groups *groupStore, cands []int32, k int, dst []int32) []int32 {
	worse := func(x, y int32) bool {
		a, b := groups.at(x).key(), groups.at(y).key()
		return compareKeys(&a, &b) > 0
	}
	h := dst
	for _, gi := range cands {
		switch {
		case len(h) < k:
			h = append(h, gi)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
		case k > 0 && worse(h[0], gi):
			h[0] = gi
			for i := 0; ; {
				l := 2*i + 1
				if l >= len(h) {
					break
				}
				c := l
				if l+1 < len(h) && worse(h[l+1], h[l]) {
					c = l + 1
				}
				if !worse(h[c], h[i]) {
					break
				}
				h[i], h[c] = h[c], h[i]
				i = c
			}
		}
	}
	slices.SortFunc(h, func(x, y int32) int {
		a, b := groups.at(x).key(), groups.at(y).key()
		return compareKeys(&a, &b)
	})
	return h
}

// readKind fills ks from the ranking: the first k top sites read live, the
// rest of the ranked top folded into Other, and the totals.
func (w *Watcher) readKind(ks *KindSnapshot, kind Kind, k int, stacks bool) {
	r := &w.rank
	rest := &r.rest[kind]
	o := &ks.Other
	counts := o.Duration.Counts
	*o = SiteStats{
		Kind:    kind,
		Counts:  rest.Counts,
		Suspect: rest.suspect,
		Class:   rest.class,
		Growth:  rest.growth,
	}
	o.Duration = Histogram{Bounds: durationBoundsSeconds, Counts: reuseCounts(counts), Count: rest.durCount,
		Sum: float64(rest.durSumNs) / 1e9}
	copy(o.Duration.Counts, r.counts[kind][:])
	ks.Growing = rest.growing
	ks.Ranked, ks.Tracked = rest.ranked, rest.tracked

	top := ks.Top[:0]
	var one SiteStats
	for i, gi := range r.top[kind] {
		g := r.groups.at(gi)
		if i >= k {
			one.Duration.Counts = reuseCounts(one.Duration.Counts)
			w.readGroup(g, &r.tops[kind][i], &one, false)
			if one.Class == ClassGrowing {
				ks.Growing++
			}
			o.merge(&one)
			continue
		}
		var s *SiteStats
		if len(top) < cap(top) {
			top = top[:len(top)+1]
			s = &top[len(top)-1]
		} else {
			top = append(top, SiteStats{})
			s = &top[len(top)-1]
		}
		s.Duration.Counts = reuseCounts(s.Duration.Counts)
		w.readGroup(g, &r.tops[kind][i], s, stacks)
		if s.Class == ClassGrowing {
			ks.Growing++
		}
	}
	ks.Top = top

	t := Totals{Kind: kind, Sites: rest.entries}
	add := func(s *SiteStats) {
		t.Counts.Add(s.Counts)
		t.Suspect += s.Suspect
	}
	add(o)
	ks.Duration.Counts = reuseCounts(ks.Duration.Counts)
	ks.Duration.Bounds = durationBoundsSeconds
	copy(ks.Duration.Counts, o.Duration.Counts)
	ks.Duration.Count, ks.Duration.Sum = o.Duration.Count, o.Duration.Sum
	for i := range top {
		add(&top[i])
		for j, n := range top[i].Duration.Counts {
			ks.Duration.Counts[j] += n
		}
		ks.Duration.Count += top[i].Duration.Count
		ks.Duration.Sum += top[i].Duration.Sum
	}
	ks.Totals = t
}

// reuseCounts returns c cleared if it can hold a histogram's counts, else
// a new slice.
func reuseCounts(c []uint64) []uint64 {
	if cap(c) < durBuckets {
		return make([]uint64, durBuckets)
	}
	c = c[:durBuckets:durBuckets]
	clear(c)
	return c
}

// sumTop fills ts for top group g: the age buckets of every entry (read
// again under each ring's lock: the pass-1 read of this cycle already
// observed it, so this one observes nothing), and the counters of the
// entries past the first liveEntries.
func (w *Watcher) sumTop(g *group, ts *topSums) {
	cur := w.rank.cycles[g.kind]
	n := 0
	for e := g.head; e != nil; e = e.next {
		var survived [AgeBuckets]uint64
		e.read(cur, w.cfg.suspectCycles, &survived)
		for i, c := range survived {
			ts.survived[i] += c
		}
		if n++; n <= liveEntries {
			continue
		}
		ts.add(e, &ts.dur)
	}
}

// readGroup sets s to the counts of top group g, keeping s's
// Duration.Counts (of length durBuckets) as the histogram's backing: the
// counters of its first liveEntries entries read live, the rest and the
// ring counts from the ranking (ts). Executed and cleared are loaded
// before registered, so that Outstanding never underflows.
func (w *Watcher) readGroup(g *group, ts *topSums, s *SiteStats, withStack bool) {
	counts := s.Duration.Counts
	copy(counts, ts.dur[:])
	c := ts.counterSums
	n := 0
	res, resCounts := g.head.res, Counts{}
	for e := g.head; e != nil && n < liveEntries; e = e.next {
		n++
		ec := c.add(e, (*[durBuckets]uint64)(counts))
		if e.res != 0 && (res == 0 || n == 1 || namesBetter(ec, resCounts)) {
			res, resCounts = e.res, ec
		}
	}
	*s = SiteStats{
		Kind:     g.kind,
		Site:     *g.frame,
		Counts:   c.Counts,
		Resource: resourceOf(res).Name,
		Survived: ts.survived,
		Suspect:  min(g.suspect, c.Outstanding),
		Class:    g.class,
		Growth:   g.growth,
		Accepted: g.accepted,
		Duration: Histogram{Bounds: durationBoundsSeconds, Counts: counts, Count: c.durCount,
			Sum: float64(c.durSumNs) / 1e9},
	}
	if g.class == ClassGrowing {
		s.Leak = resourceOf(res).Leak
	}
	if withStack {
		if g.head.stack != nil {
			s.Stack, s.PCs = g.head.stack.Frames(), g.head.stack.PCs()
		} else {
			s.Stack = []stackcapture.Frame{s.Site}
		}
	}
}

// appendEntries appends every ledger entry to dst, grown once up front
// (entries are 120 bytes; a ledger of 10 000 grown by doubling copies
// megabytes).
func (w *Watcher) appendEntries(dst []Entry) []Entry {
	dst = slices.Grow(dst, w.sites.Len()+len(w.overflow))
	w.eachEntry(func(s *site) {
		c := s.counts()
		e := Entry{Kind: s.kind, Counts: c}
		var survived [AgeBuckets]uint64
		e.Suspect, e.Class, e.Growth = s.read(w.cycles[s.kind].Load(), w.cfg.suspectCycles, &survived)
		if s.stack != nil && !s.stack.Overflow() {
			e.PCs = s.stack.PCs()
		}
		if e.PCs == nil {
			e.Site = s.siteFrame()
		}
		dst = append(dst, e)
	})
	return dst
}
