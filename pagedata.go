package probe

import (
	"fmt"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/sitekey"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

// PageData is the live page's JSON document, served at
// /debug/gcprobe/data.json (PageDataPath under the page). The page renders
// it and nothing else; scripts and tests may read it too. Field names are
// stable within a PageSchema version: a field is added, never renamed or
// removed, without a new version. Durations are in seconds, sizes in
// bytes, times RFC 3339.
type PageData struct {
	// Schema is PageSchema.
	Schema int `json:"schema"`
	// Time is when the document was built.
	Time time.Time `json:"time"`
	// HistoryCycles is PageHistoryCycles: the most rows History holds.
	HistoryCycles int `json:"history_cycles"`
	// MoreCyclesNeeded is how many more GC cycles the ledger must see
	// before it can tell a leak from a cache; 0 once it can.
	MoreCyclesNeeded int `json:"more_cycles_needed"`
	// MoreSecondsNeeded is how much longer, in seconds, the probe must run
	// before a registration can be old enough to be a suspect
	// (WithSuspectAge); 0 once it has.
	MoreSecondsNeeded float64 `json:"more_seconds_needed"`
	// LedgerCycles are the GC cycles the ledger has counted, per kind
	// ("finalizer", "cleanup"): a cycle counts once the goroutine that
	// runs that kind of callback has caught up with it, so while a queue
	// is backed up these lag GC.Cycles, and MoreCyclesNeeded waits.
	LedgerCycles map[string]uint64 `json:"ledger_cycles"`
	// RuntimeMode reports the runtime build mode (finalizercheck
	// -runtime): Dropped counts are only known in it.
	RuntimeMode bool `json:"runtime_mode"`

	// Counters describe the ledger's counters (finalizerwatch.Counters),
	// in its order: the columns of Sites' and Totals' Counts. The page
	// draws a column per counter from these, so a counter the ledger
	// declares reaches the page with no change to it.
	Counters []PageCounter `json:"counters"`

	// GC is the sampler's latest round.
	GC PageGC `json:"gc"`
	// Queues are the finalizer and cleanup queues now.
	Queues PageQueues `json:"queues"`
	// Totals are each kind's ledger summed over every site.
	Totals map[string]PageTotals `json:"totals"`
	// History are the GC cycles kept, oldest first, one row per cycle
	// (see PageHistoryCycles).
	History []PageCycle `json:"history"`
	// Pauses are the runtime's per-cycle stop-the-world pauses over the
	// cycles of History, oldest first: one point per GC cycle.
	Pauses []PagePause `json:"pauses"`
	// Sites are the WithTopK sites of either kind most likely to leak
	// by the leak model, most likely first (growing, then stable, then
	// churn): finalizerwatch.Snapshot.Top.
	Sites []PageSite `json:"sites"`
	// Running are the watched callbacks running now, longest first.
	Running []PageRunning `json:"running"`
	// Firing are the detectors firing now; Events the latest PageEvents
	// detector events (firing and cleared), oldest first.
	Firing []PageEvent `json:"firing"`
	Events []PageEvent `json:"events"`
	// Overflow counts what the ledger's bounded tables refused.
	Overflow PageOverflow `json:"overflow"`
	// GCCause says why the GC works hard: the cause detectors firing now
	// (allocation rate, live-heap growth, memory limit, ...), each in
	// words with the lines to look at first (Report.GCCause).
	GCCause PageGCCause `json:"gc_cause"`
	// AllocatingSites are the heap profile's top allocating sites over
	// its latest window and the sites whose in-use bytes grow.
	AllocatingSites PageAllocating `json:"allocating_sites"`
	// Links are the probe's other handlers, as absolute paths: the pprof
	// profile, its text form and the Prometheus metrics.
	Links PageLinks `json:"links"`
}

// PageSchema is the version of PageData's JSON.
const PageSchema = 1

// PageGC is the GC as the sampler's latest round saw it.
type PageGC struct {
	Cycles          uint64  `json:"cycles"`
	Forced          uint64  `json:"forced"`
	ForcedPerMinute float64 `json:"forced_per_minute"`
	HeapLive        uint64  `json:"heap_live_bytes"`
	HeapGoal        uint64  `json:"heap_goal_bytes"`
	GOGC            int64   `json:"gogc"`
	MemoryLimit     uint64  `json:"memory_limit_bytes"`
	CPUFraction     float64 `json:"gc_cpu_fraction"`
	PauseP50        float64 `json:"pause_p50_seconds"`
	PauseP99        float64 `json:"pause_p99_seconds"`
	PauseMax        float64 `json:"pause_max_seconds"`
	PauseWindow     int     `json:"pause_window_cycles"`
}

// PageQueues are the finalizer and the cleanup queue.
type PageQueues struct {
	Finalizer PageQueue `json:"finalizer"`
	Cleanup   PageQueue `json:"cleanup"`
}

// PageQueue is one queue: its length, drain rate and delay (the delay a
// callback queued now would wait).
type PageQueue struct {
	Length         uint64  `json:"length"`
	DrainPerSecond float64 `json:"drain_per_second"`
	Delay          float64 `json:"delay_seconds"`
}

// PageCounter describes one of the ledger's counters
// (finalizerwatch.Counter).
type PageCounter struct {
	Name string `json:"name"` // snake case: "registered", "cleared_outside"
	Help string `json:"help"`
	// Gauge marks a count that goes down as well as up (outstanding).
	Gauge bool `json:"gauge"`
	// Sparse marks a count that is 0 at nearly every site: the page
	// draws its column only where a site shows it above 0 (or, for a
	// Resource counter, in the runtime build mode).
	Sparse bool `json:"sparse"`
	// Resource marks a count that only a site with a resource has, known
	// in the runtime build mode only (dropped).
	Resource bool `json:"resource"`
}

// PageTotals is one kind's ledger summed.
type PageTotals struct {
	Sites       int    `json:"sites"`
	Registered  uint64 `json:"registered"`
	Executed    uint64 `json:"executed"`
	Outstanding uint64 `json:"outstanding"`
	Suspect     uint64 `json:"suspect"`
	Dropped     uint64 `json:"dropped"`
	// Counts are every counter of the kind, in PageData.Counters' order.
	Counts []uint64 `json:"counts"`
}

// PageCycle is one GC cycle of the history.
type PageCycle struct {
	// Cycle is the runtime's GC count at the row.
	Cycle       uint64     `json:"cycle"`
	Time        time.Time  `json:"time"`
	HeapLive    uint64     `json:"heap_live_bytes"`
	HeapGoal    uint64     `json:"heap_goal_bytes"`
	CPUFraction float64    `json:"gc_cpu_fraction"`
	Queues      PageQueues `json:"queues"`
}

// PagePause is one GC cycle's stop-the-world time.
type PagePause struct {
	Cycle   uint64    `json:"cycle"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
}

// PageSite is one top site.
type PageSite struct {
	Kind     string `json:"kind"`
	Site     string `json:"site"` // "function file:line", as on /metrics
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Resource string `json:"resource,omitempty"`
	Class    string `json:"class"` // growing, stable or churn
	// Verdict is what the page's badge says of the site: "dropped" where
	// it dropped a file, connection, os.Root or os.Process without Close
	// (Dropped above 0), a leak at that line whatever Class says of what
	// is still outstanding there; else Class. The Report's class column
	// says the same.
	Verdict string `json:"verdict"`
	// Words is, at a dropped site, the sentence that says what was
	// dropped and what to do at the line ("12 files dropped without
	// Close, each held open until the GC found it: close them where they
	// are opened, ..."), as the Report says it; at a growing site whose
	// resource says what leaks, that (SiteStats.Leak: "HTTP response
	// body not closed ..."); empty elsewhere.
	Words       string `json:"words,omitempty"`
	Growth      uint64 `json:"growth"`
	Registered  uint64 `json:"registered"`
	Executed    uint64 `json:"executed"`
	Outstanding uint64 `json:"outstanding"`
	Suspect     uint64 `json:"suspect"`
	// Dropped is SiteStats.Dropped: runtime build mode only, else 0.
	Dropped uint64 `json:"dropped"`
	// Counts are every counter of the site, in PageData.Counters' order
	// (Registered, Executed, Outstanding and Dropped above among them).
	Counts []uint64 `json:"counts"`
	// Suspects is the site's suspect count at each row of History (same
	// index), null where the site was not among that cycle's top sites.
	Suspects []*uint64 `json:"suspects"`
	// Stack is the registration stack, innermost first, at most
	// pageMaxFrames frames.
	Stack []PageFrame `json:"stack"`
}

// PageFrame is one frame of a stack.
type PageFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// PageRunning is a callback running now.
type PageRunning struct {
	Kind    string  `json:"kind"`
	Site    string  `json:"site"`
	Seconds float64 `json:"seconds"`
}

// PageEvent is a detector event.
type PageEvent struct {
	Detector  string    `json:"detector"`
	Firing    bool      `json:"firing"`
	Value     float64   `json:"value"`
	Threshold float64   `json:"threshold"`
	Since     time.Time `json:"since"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind,omitempty"`
	Site      string    `json:"site,omitempty"`
}

// PageGCCause is why the GC works hard now.
type PageGCCause struct {
	// Causes are the cause detectors firing now; empty when healthy.
	Causes []PageCause `json:"causes"`
}

// PageCause is one firing cause detector and the lines it points at.
type PageCause struct {
	Detector string    `json:"detector"`
	Words    string    `json:"words"`
	Fix      string    `json:"fix,omitempty"`
	Note     string    `json:"note,omitempty"`
	Since    time.Time `json:"since"`
	// Growing reports that Sites grow (in-use bytes) rather than
	// allocate.
	Growing bool           `json:"growing"`
	Sites   []PageHeapSite `json:"sites"`
	// Callers are the lines a cause names besides the heap profile's
	// sites: for forced_gc in the runtime build mode, those that called
	// runtime.GC or debug.FreeOSMemory ("function file:line (N calls)");
	// for an operator cause, the line to change (the reconciler's List).
	Callers []string `json:"callers,omitempty"`
}

// PageAllocating is the heap profile's picture.
type PageAllocating struct {
	// WindowSeconds is the time the allocation figures cover (0 before
	// the second read of the heap profile).
	WindowSeconds float64 `json:"window_seconds"`
	// Allocating are the sites that allocated most over the window, most
	// first; Growing those whose in-use bytes grew, most grown first.
	Allocating []PageHeapSite `json:"allocating"`
	Growing    []PageHeapSite `json:"growing"`
}

// PageHeapSite is one site of the heap profile.
type PageHeapSite struct {
	Site string `json:"site"`
	// Path is the site's line down to the allocation
	// (heapprofile.Site.PathString); empty when the site allocates itself.
	Path                string      `json:"path,omitempty"`
	AllocBytesPerSecond float64     `json:"alloc_bytes_per_second"`
	InUseBytes          int64       `json:"in_use_bytes"`
	GrownBytes          int64       `json:"grown_bytes"`
	GrowingFor          int         `json:"growing_for_windows"`
	Stack               []PageFrame `json:"stack"`
}

// PageOverflow counts what the ledger's bounded tables refused.
type PageOverflow struct {
	Sites  uint64 `json:"sites"`
	Stacks uint64 `json:"stacks"`
}

// PageLinks are the probe's other handlers.
type PageLinks struct {
	Profile     string `json:"profile"`
	ProfileText string `json:"profile_text"`
	Metrics     string `json:"metrics"`
}

// Bounds of the page's document, whatever the ledger holds: sites are at
// most WithTopK, each with a stack of at most
// pageMaxFrames frames, strings cut to pageMaxString bytes.
const (
	pageMaxFrames = 48
	pageMaxString = 512
)

// pageRead is everything the page shows, read at one time. readPage is
// the one place that reads the ledger and the sampler for the page, so
// that a change in their read APIs changes this function alone.
type pageRead struct {
	sn     finalizerwatch.Snapshot // Top, Kinds' totals, Running, MoreCyclesNeeded, Overflow
	ms     memstats.Snapshot
	firing []memstats.Event
	pauses []memstats.Pause
	cause  GCCause // the firing causes and the heap profile, as the Report has them
}

func (p *Probe) readPage(r *pageRead, sinceCycle uint64) {
	p.watcher.Read(&r.sn, finalizerwatch.ReadOptions{TopK: p.cfg.topK, Stacks: true})
	p.sampler.SnapshotInto(&r.ms)
	r.firing = p.sampler.Active(r.firing[:0])
	r.pauses = p.sampler.PausesSince(sinceCycle, r.pauses[:0])
	r.cause = p.gcCause(r.firing)
}

// pageData builds the page's document.
func (p *Probe) pageData(now time.Time) *PageData {
	d := &PageData{
		Schema:        PageSchema,
		Time:          now,
		HistoryCycles: PageHistoryCycles,
		RuntimeMode:   finalizerwatch.RuntimeMode(),
		Links:         PageLinks{Profile: ProfilePath, ProfileText: ProfilePath + "?debug=1", Metrics: MetricsPath},
		Counters:      pageCounters,
		Totals:        map[string]PageTotals{},
		LedgerCycles:  map[string]uint64{},
		History:       []PageCycle{},
		Pauses:        []PagePause{},
		Sites:         []PageSite{},
		Running:       []PageRunning{},
		Firing:        []PageEvent{},
		Events:        []PageEvent{},
	}
	// The history first, then the read: the pauses are read from the
	// oldest cycle the history holds.
	type siteAt struct {
		row     int
		suspect uint64
	}
	bySite := map[sitekey.Key][]siteAt{}
	p.history.eachRow(func(c *cycleRow) {
		i := len(d.History)
		d.History = append(d.History, PageCycle{
			Cycle: c.cycle, Time: c.time, HeapLive: c.heapLive, HeapGoal: c.heapGoal, CPUFraction: c.gcCPU,
			Queues: PageQueues{Finalizer: pageQueueRow(c.queues[0]), Cleanup: pageQueueRow(c.queues[1])},
		})
		for _, s := range c.sites {
			bySite[s.key] = append(bySite[s.key], siteAt{i, s.suspect})
		}
	})
	p.history.eachEvent(func(e *memstats.Event) { d.Events = append(d.Events, pageEvent(e)) })
	since := uint64(0)
	if len(d.History) > 0 {
		since = d.History[0].Cycle
	}
	var r pageRead
	p.readPage(&r, since)
	d.MoreCyclesNeeded = r.sn.MoreCyclesNeeded
	d.MoreSecondsNeeded = r.sn.MoreTimeNeeded.Round(time.Second).Seconds()
	g := &r.ms
	d.GC = PageGC{
		Cycles: g.Cycles, Forced: g.ForcedCycles, ForcedPerMinute: g.ForcedPerMinute,
		HeapLive: g.HeapLive, HeapGoal: g.HeapGoal, GOGC: g.GOGC, MemoryLimit: g.MemoryLimit,
		CPUFraction: g.GCCPUFraction, PauseP50: g.PauseP50.Seconds(), PauseP99: g.PauseP99.Seconds(),
		PauseMax: g.PauseMax.Seconds(), PauseWindow: g.PauseWindow,
	}
	d.Queues = PageQueues{Finalizer: pageQueue(&g.Finalizers), Cleanup: pageQueue(&g.Cleanups)}
	for _, ps := range r.pauses {
		if ps.Cycle >= since {
			d.Pauses = append(d.Pauses, PagePause{Cycle: ps.Cycle, End: ps.End, Seconds: ps.Duration.Seconds()})
		}
	}
	for k := range r.sn.Kinds {
		ks := &r.sn.Kinds[k]
		d.LedgerCycles[finalizerwatch.Kind(k).String()] = r.sn.Cycles[k]
		d.Totals[finalizerwatch.Kind(k).String()] = PageTotals{Sites: ks.Sites, Registered: ks.Registered,
			Executed: ks.Executed, Outstanding: ks.Outstanding, Suspect: ks.Suspect, Dropped: ks.Totals.Dropped,
			Counts: pageCounts(&ks.Counts)}
	}
	for i := range r.sn.Top {
		s := &r.sn.Top[i]
		ps := pageSite(s, len(d.History))
		for _, at := range bySite[sitekey.Of(s)] {
			v := at.suspect
			ps.Suspects[at.row] = &v
		}
		d.Sites = append(d.Sites, ps)
	}
	for _, c := range r.sn.Running {
		d.Running = append(d.Running, PageRunning{Kind: c.Kind.String(), Site: c.Site.Label(), Seconds: c.For.Seconds()})
	}
	for i := range r.firing {
		d.Firing = append(d.Firing, pageEvent(&r.firing[i]))
	}
	d.Overflow = PageOverflow{Sites: r.sn.Overflow.Sites, Stacks: r.sn.Overflow.Stacks}
	d.GCCause.Causes = []PageCause{}
	for _, c := range r.cause.Causes {
		var callers []string
		if c.Line.Line != 0 {
			callers = []string{cut(c.Line.Label())}
		}
		callers = append(callers, pageCallers(c.Callers)...)
		d.GCCause.Causes = append(d.GCCause.Causes, PageCause{Detector: c.Name, Words: cut(c.Words),
			Fix: cut(c.Fix), Note: cut(c.Note), Callers: callers, Since: c.Since, Growing: c.Growing, Sites: pageHeapSites(c.Sites)})
	}
	h := &r.cause.Heap
	d.AllocatingSites = PageAllocating{WindowSeconds: h.Window.Seconds(),
		Allocating: pageHeapSites(h.Allocating), Growing: pageHeapSites(h.Growing)}
	return d
}

// pageSite is the page's row of top site s, with room for the suspect
// counts of rows rows of history.
func pageSite(s *finalizerwatch.SiteStats, rows int) PageSite {
	return PageSite{
		Kind: s.Kind.String(), Site: s.Site.Label(),
		Function: cut(s.Site.Function), File: cut(s.Site.File), Line: s.Site.Line,
		Resource: cut(s.Resource), Class: s.Class.String(), Verdict: siteVerdict(s), Words: siteWords(s),
		Growth:     s.Growth,
		Registered: s.Registered, Executed: s.Executed, Outstanding: s.Outstanding, Suspect: s.Suspect,
		Dropped:  s.Dropped,
		Counts:   pageCounts(&s.Counts),
		Suspects: make([]*uint64, rows),
		Stack:    pageStack(s.Stack),
	}
}

// pageCounters is PageData.Counters: finalizerwatch.Counters, described.
var pageCounters = func() []PageCounter {
	var out []PageCounter
	for _, c := range finalizerwatch.Counters() {
		out = append(out, PageCounter{Name: c.Name, Help: c.Help, Gauge: c.Gauge, Sparse: c.Sparse, Resource: c.Resource})
	}
	return out
}()

// pageCounts is c's counters, in pageCounters' order.
func pageCounts(c *finalizerwatch.Counts) []uint64 {
	out := make([]uint64, 0, finalizerwatch.NumCounters)
	for _, k := range finalizerwatch.Counters() {
		out = append(out, k.Value(c))
	}
	return out
}

func pageHeapSites(sites []heapprofile.Site) []PageHeapSite {
	out := make([]PageHeapSite, 0, len(sites))
	for i := range sites {
		s := &sites[i]
		path := ""
		if len(s.Path) > 0 {
			path = cut(s.PathString())
		}
		out = append(out, PageHeapSite{Site: s.Label(), Path: path, AllocBytesPerSecond: s.AllocBytesPerSecond,
			InUseBytes: s.InUseBytes, GrownBytes: s.GrownBytes, GrowingFor: s.GrowingFor, Stack: pageStack(userFrames(s.Stack))})
	}
	return out
}

func pageCallers(cs []finalizerwatch.ForcedGCSite) []string {
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, 0, len(cs))
	for i := range cs {
		out = append(out, cut(fmt.Sprintf("%s (%d calls)", cs[i].Site.Label(), cs[i].Calls)))
	}
	return out
}

func pageQueue(q *memstats.Queue) PageQueue {
	return PageQueue{Length: q.Length, DrainPerSecond: q.DrainPerSecond, Delay: q.Latency.Seconds()}
}

func pageQueueRow(q queueRow) PageQueue {
	return PageQueue{Length: q.length, DrainPerSecond: q.drain, Delay: q.latency.Seconds()}
}

func pageEvent(e *memstats.Event) PageEvent {
	return PageEvent{Detector: e.Detector, Firing: e.Firing, Value: e.Value, Threshold: e.Threshold,
		Since: e.Since, Time: e.Time, Kind: e.Kind, Site: cut(e.Site)}
}

func pageStack(st []stackcapture.Frame) []PageFrame {
	out := make([]PageFrame, 0, min(len(st), pageMaxFrames))
	for i := range st {
		if i == pageMaxFrames {
			break
		}
		out = append(out, PageFrame{Function: cut(st[i].Function), File: cut(st[i].File), Line: st[i].Line})
	}
	return out
}

// cut bounds s to pageMaxString bytes (encoding/json makes any bytes
// valid UTF-8).
func cut(s string) string {
	if len(s) > pageMaxString {
		return s[:pageMaxString]
	}
	return s
}
