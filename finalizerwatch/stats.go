package finalizerwatch

import (
	"cmp"
	"unsafe"

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
	Dropped uint64
	// RanAfterStop counts, of Executed, the cleanups that ran though
	// Cleanup.Stop was called for them: the runtime had queued them
	// already, and a Stop does not stop a queued cleanup. A program that
	// counts on Stop to keep its cleanup from running races with it there.
	RanAfterStop uint64
	Outstanding  uint64 // Registered - Executed - Cleared
}

// Counter describes one of the Counts to the ledger's readers: the
// Prometheus exporter's per-site series, the pprof profile's sample types,
// the Report's columns and the leak-report spans' attributes are made from
// Counters, in its order, and so are the live page's columns. A counter
// added to Counts and to the list of Counters reaches every one of them:
// one of something rare is a field of Counts, a row of counters marked
// rare (kept in an entry's rare table, at no cost to an entry that never
// counts it) and a call of site.addRare where it happens, and its line in
// docs/metrics.md (RanAfterStop took those four files, its test included).
type Counter struct {
	// Name is the counter's name in snake case ("registered",
	// "cleared_outside"): the Prometheus series
	// gcprobe_finalizers_<Name>_total (gcprobe_finalizers_<Name> for a
	// gauge), the span attribute gcprobe.<Name> and, for a Summary
	// counter, the pprof sample type <Name>/count and the Report's
	// column.
	Name string
	// Help says what the counter counts at a site, in a sentence.
	Help string
	// Gauge marks a count that goes down as well as up (Outstanding);
	// the others only grow.
	Gauge bool
	// Resource marks a count that only a site with a Resource has
	// (Dropped): the Prometheus series carries the label resource, and is
	// sent for every such site.
	Resource bool
	// Sparse marks a count that is 0 at nearly every site (Dropped,
	// ClearedOutside): its Prometheus series is sent only for a site
	// where it is above 0 (or, for a Resource counter, that has a
	// Resource), so that it costs a scrape nothing where nothing happened.
	Sparse bool
	// Summary marks the counters that the Report's tables and the pprof
	// profile show (SummaryCounters); every counter is a Prometheus series
	// and a span attribute.
	Summary bool
	// Value reads the counter from c.
	Value func(c *Counts) uint64

	// rare marks a count that a ledger entry keeps in its rare table
	// (site.rare, allocated at the entry's first such event) rather than in
	// a field of its own: a new counter of something seldom seen is a row
	// here with rare set and a call of site.addRare where it happens, and
	// takes no room in an entry that never sees it (the entry is full:
	// TestSiteNodeSize).
	rare bool
}

// counters is the list Counters returns.
var counters = completeCounters([NumCounters]Counter{
	{Name: "registered", Summary: true,
		Help: "Finalizers or cleanups registered at the site through the watcher."},
	{Name: "executed", Summary: true,
		Help: "Finalizers or cleanups registered at the site that ran to completion."},
	{Name: "cleared",
		Help: "Finalizers or cleanups registered at the site that were cleared (SetFinalizer(obj, nil), Cleanup.Stop) before running."},
	{Name: "cleared_outside", Sparse: true, rare: true,
		Help: "Of the cleared, finalizers registered at the site that were found cleared or replaced outside the watcher (runtime.SetFinalizer called directly) when their object's address was registered again."},
	{Name: "dropped", Resource: true, Sparse: true,
		Help: "Finalizers or cleanups that ran for an object the standard library finalizes only when it was dropped without Close (files, network connections, os.Root, os.Process), registered through the site: each one a descriptor or handle left to the garbage collector. Runtime build mode only."},
	{Name: "ran_after_stop", Sparse: true, rare: true,
		Help: "Of the executed, cleanups registered at the site that ran though Cleanup.Stop was called for them: the runtime had queued them already, and Stop does not stop a queued cleanup."},
	{Name: "outstanding", Gauge: true, Summary: true,
		Help: "Finalizers or cleanups registered at the site through the watcher that have neither run nor been cleared."},
})

// completeCounters completes the rows of counters: each one's Value.
func completeCounters(cs [NumCounters]Counter) [NumCounters]Counter {
	for i := range cs {
		cs[i].Value = func(c *Counts) uint64 { return *c.at(i) }
	}
	return cs
}

// at is c's counter of index i: Counts is NumCounters uint64s, in the
// order of Counters (TestCountersDescribeEveryCount; the sizes below).
// It takes no function value, so that a Counts on the stack stays there.
func (c *Counts) at(i int) *uint64 {
	return &(*[NumCounters]uint64)(unsafe.Pointer(c))[i]
}

// Counts is exactly NumCounters uint64s: neither difference underflows.
var (
	_ [unsafe.Sizeof(Counts{}) - NumCounters*unsafe.Sizeof(uint64(0))]struct{}
	_ [NumCounters*unsafe.Sizeof(uint64(0)) - unsafe.Sizeof(Counts{})]struct{}
)

// rareCounters are the indexes in counters (and in Counts) of the rare
// rows, in order: a rare counter's slot in an entry's rare table is its
// place here.
var rareCounters = func() []int {
	var rare []int
	for i := range counters {
		if counters[i].rare {
			rare = append(rare, i)
		}
	}
	if len(rare) > maxRare {
		panic("finalizerwatch: more rare counters than a rare table holds (maxRare)")
	}
	return rare
}()

// rareSlot is the slot of the rare counter named name, for site.addRare.
func rareSlot(name string) int {
	for slot, i := range rareCounters {
		if counters[i].Name == name {
			return slot
		}
	}
	panic("finalizerwatch: no rare counter " + name)
}

// NumCounters is the number of counters of Counts (and of Counters).
const NumCounters = 7

// Counters returns the description of every counter of Counts, in the
// order of its fields.
func Counters() [NumCounters]Counter { return counters }

// SummaryCounters returns the Summary counters of Counters, in its order:
// the Report's columns and the pprof profile's first sample types are
// made from it, so a counter marked Summary reaches both.
func SummaryCounters() []Counter {
	var sum []Counter
	for _, c := range counters {
		if c.Summary {
			sum = append(sum, c)
		}
	}
	return sum
}

// Add adds o to c, counter by counter.
func (c *Counts) Add(o Counts) {
	for i := range NumCounters {
		*c.at(i) += *o.at(i)
	}
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
	// registered at this site ("os.File", "net.Conn", "net.Listener",
	// "net.Conn (HTTP client)": dialed for net/http's Transport, "net.Conn
	// (accepted)"; see Resource; where a line registered several, the one
	// it dropped the
	// most, else holds the most outstanding), empty for a registration
	// made by the site itself.
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
	// pool) or churn (no suspects). See the package documentation.
	Class Class
	// Growth is how many suspects the site gained, in new highs of its
	// suspect count (or in every rise, while the count has risen
	// GrowthRun observations in a row), over its last GrowthWindow
	// observations: what the ranking orders growing sites by.
	Growth uint64
	// Leak, in the runtime build mode, says what a growing site leaks
	// where its Resource tells it (Resource.Leak: "HTTP response body
	// not closed" at a line whose HTTP client connections grow); empty
	// for a site that is not growing.
	Leak string
	// Accepted reports that the site registered only connections the
	// program accepted (Resource.Accepted): their peers decide how long
	// they stay open, so that the site ranks after the other sites of its
	// class.
	Accepted bool
}

// Overflow says how much the watcher's bounded tables refused.
type Overflow struct {
	Sites  uint64 // registrations counted under the overflow site for want of room
	Stacks uint64 // stacks not kept for want of room
}

func (w *Watcher) overflowNow() Overflow {
	return Overflow{
		Sites:  w.overflow[KindFinalizer].counts().Registered + w.overflow[KindCleanup].counts().Registered,
		Stacks: w.stacks.Overflowed() + w.stacksRefused.Load(),
	}
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

// rankKey is what the ranking orders by: growing sites first, then sites
// that dropped a file, connection or process without Close (a leak of
// another kind, whatever the growth model makes of it: its finalizers
// run, so it is churn to the model), then stable, then churn; within a class, a site of accepted connections only
// after the others (the server side of a leak whose cause is the
// client's: an HTTP response body not closed keeps the client's
// connection and the server's both open, and the client's line is the
// one to fix); among growing sites, by growth; then by suspects,
// outstanding and registrations, all descending; then kind, function,
// file and line, ascending, so that the order is total.
type rankKey struct {
	class                                    Class
	accepted                                 bool
	dropped                                  bool
	growth, suspect, outstanding, registered uint64
	kind                                     Kind
	site                                     *stackcapture.Frame
}

// tier is the key's place by class: churn 0, stable 1, dropped (not
// growing) 2, growing 3.
func (k *rankKey) tier() int {
	switch {
	case k.class == ClassGrowing:
		return 3
	case k.dropped:
		return 2
	}
	return int(k.class)
}

func compareKeys(a, b *rankKey) int {
	if c := cmp.Compare(b.tier(), a.tier()); c != 0 {
		return c
	}
	if a.accepted != b.accepted {
		if a.accepted {
			return 1
		}
		return -1
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
