package page

import (
	"fmt"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/sitekey"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

// Data is the live page's JSON document, served at
// /debug/gcprobe/data.json (DataPath under the page). The page renders
// it and nothing else; scripts and tests may read it too. Field names are
// stable within a Schema version: a field is added, never renamed or
// removed, without a new version. Durations are in seconds, sizes in
// bytes, times RFC 3339.
type Data struct {
	// Schema is Schema (probe.PageSchema).
	Schema int `json:"schema"`
	// Time is when the document was built.
	Time time.Time `json:"time"`
	// HistoryCycles is HistoryCycles: the most rows History holds.
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
	Counters []Counter `json:"counters"`

	// GC is the sampler's latest round.
	GC GC `json:"gc"`
	// Queues are the finalizer and cleanup queues now.
	Queues Queues `json:"queues"`
	// Totals are each kind's ledger summed over every site.
	Totals map[string]Totals `json:"totals"`
	// History are the GC cycles kept, oldest first, one row per cycle
	// (see HistoryCycles).
	History []Cycle `json:"history"`
	// Pauses are the runtime's per-cycle stop-the-world pauses over the
	// cycles of History, oldest first: one point per GC cycle.
	Pauses []Pause `json:"pauses"`
	// Sites are the WithTopK sites of either kind most likely to leak
	// by the leak model, most likely first (growing, then stable, then
	// churn): finalizerwatch.Snapshot.Top.
	Sites []Site `json:"sites"`
	// Running are the watched callbacks running now, longest first.
	Running []Running `json:"running"`
	// Firing are the detectors firing now; Events the latest HistoryEvents
	// detector events (firing and cleared), oldest first.
	Firing []Event `json:"firing"`
	Events []Event `json:"events"`
	// Overflow counts what the ledger's bounded tables refused.
	Overflow Overflow `json:"overflow"`
	// GCCause says why the GC works hard: the cause detectors firing now
	// (allocation rate, live-heap growth, memory limit, ...), each in
	// words with the lines to look at first (Report.GCCause).
	GCCause GCCause `json:"gc_cause"`
	// AllocatingSites are the heap profile's top allocating sites over
	// its latest window and the sites whose in-use bytes grow.
	AllocatingSites Allocating `json:"allocating_sites"`
	// Links are the probe's other handlers, as absolute paths: the pprof
	// profile, its text form and the Prometheus metrics.
	Links Links `json:"links"`
}

// Schema is the version of Data's JSON.
const Schema = 1

// GC is the GC as the sampler's latest round saw it.
type GC struct {
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

// Queues are the finalizer and the cleanup queue.
type Queues struct {
	Finalizer Queue `json:"finalizer"`
	Cleanup   Queue `json:"cleanup"`
}

// Queue is one queue: its length, drain rate and delay (the delay a
// callback queued now would wait).
type Queue struct {
	Length         uint64  `json:"length"`
	DrainPerSecond float64 `json:"drain_per_second"`
	Delay          float64 `json:"delay_seconds"`
}

// Counter describes one of the ledger's counters
// (finalizerwatch.Counter).
type Counter struct {
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

// Totals is one kind's ledger summed.
type Totals struct {
	Sites       int    `json:"sites"`
	Registered  uint64 `json:"registered"`
	Executed    uint64 `json:"executed"`
	Outstanding uint64 `json:"outstanding"`
	Suspect     uint64 `json:"suspect"`
	Dropped     uint64 `json:"dropped"`
	// Counts are every counter of the kind, in Data.Counters' order.
	Counts []uint64 `json:"counts"`
}

// Cycle is one GC cycle of the history.
type Cycle struct {
	// Cycle is the runtime's GC count at the row.
	Cycle       uint64    `json:"cycle"`
	Time        time.Time `json:"time"`
	HeapLive    uint64    `json:"heap_live_bytes"`
	HeapGoal    uint64    `json:"heap_goal_bytes"`
	CPUFraction float64   `json:"gc_cpu_fraction"`
	Queues      Queues    `json:"queues"`
}

// Pause is one GC cycle's stop-the-world time.
type Pause struct {
	Cycle   uint64    `json:"cycle"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
}

// Site is one top site.
type Site struct {
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
	// Counts are every counter of the site, in Data.Counters' order
	// (Registered, Executed, Outstanding and Dropped above among them).
	Counts []uint64 `json:"counts"`
	// Suspects is the site's suspect count at each row of History (same
	// index), null where the site was not among that cycle's top sites.
	Suspects []*uint64 `json:"suspects"`
	// Stack is the registration stack, innermost first, at most
	// maxFrames frames.
	Stack []Frame `json:"stack"`
}

// Frame is one frame of a stack.
type Frame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// Running is a callback running now.
type Running struct {
	Kind    string  `json:"kind"`
	Site    string  `json:"site"`
	Seconds float64 `json:"seconds"`
}

// Event is a detector event.
type Event struct {
	Detector  string    `json:"detector"`
	Firing    bool      `json:"firing"`
	Value     float64   `json:"value"`
	Threshold float64   `json:"threshold"`
	Since     time.Time `json:"since"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind,omitempty"`
	Site      string    `json:"site,omitempty"`
}

// GCCause is why the GC works hard now.
type GCCause struct {
	// Causes are the cause detectors firing now; empty when healthy.
	Causes []Cause `json:"causes"`
}

// Cause is one firing cause detector and the lines it points at.
type Cause struct {
	Detector string    `json:"detector"`
	Words    string    `json:"words"`
	Fix      string    `json:"fix,omitempty"`
	Note     string    `json:"note,omitempty"`
	Since    time.Time `json:"since"`
	// Growing reports that Sites grow (in-use bytes) rather than
	// allocate.
	Growing bool       `json:"growing"`
	Sites   []HeapSite `json:"sites"`
	// Callers are the lines a cause names besides the heap profile's
	// sites: for forced_gc in the runtime build mode, those that called
	// runtime.GC or debug.FreeOSMemory ("function file:line (N calls)");
	// for an operator cause, the line to change (the reconciler's List).
	Callers []string `json:"callers,omitempty"`
}

// Allocating is the heap profile's picture.
type Allocating struct {
	// WindowSeconds is the time the allocation figures cover (0 before
	// the second read of the heap profile).
	WindowSeconds float64 `json:"window_seconds"`
	// Allocating are the sites that allocated most over the window, most
	// first; Growing those whose in-use bytes grew, most grown first.
	Allocating []HeapSite `json:"allocating"`
	Growing    []HeapSite `json:"growing"`
}

// HeapSite is one site of the heap profile.
type HeapSite struct {
	Site string `json:"site"`
	// Path is the site's line down to the allocation
	// (heapprofile.Site.PathString); empty when the site allocates itself.
	Path                string  `json:"path,omitempty"`
	AllocBytesPerSecond float64 `json:"alloc_bytes_per_second"`
	InUseBytes          int64   `json:"in_use_bytes"`
	GrownBytes          int64   `json:"grown_bytes"`
	GrowingFor          int     `json:"growing_for_windows"`
	Stack               []Frame `json:"stack"`
}

// Overflow counts what the ledger's bounded tables refused.
type Overflow struct {
	Sites  uint64 `json:"sites"`
	Stacks uint64 `json:"stacks"`
}

// Links are the probe's other handlers.
type Links struct {
	Profile     string `json:"profile"`
	ProfileText string `json:"profile_text"`
	Metrics     string `json:"metrics"`
}

// Bounds of the page's document, whatever the ledger holds: sites are at
// most WithTopK, each with a stack of at most
// maxFrames frames, strings cut to maxString bytes.
const (
	maxFrames = 48
	maxString = 512
)

// Input is what a document is built from: the probe's one read of the
// ledger, the sampler and the heap profile, the same read its Report and
// its logs are made from, and the history the probe keeps for the page.
type Input struct {
	Now         time.Time
	RuntimeMode bool
	Links       Links
	// Ledger is the ledger's read with WithTopK sites and their stacks.
	Ledger *finalizerwatch.Snapshot
	GC     *memstats.Snapshot
	Firing []memstats.Event
	// Pauses are the runtime's pauses since History's first cycle (or
	// earlier: Build keeps those of History's cycles).
	Pauses []memstats.Pause
	// Causes are the causes of GC work named now, as the Report names
	// them; Heap is the heap profile's picture they were named from.
	Causes  []CauseIn
	Heap    *heapprofile.Snapshot
	History *History
}

// CauseIn is one cause of GC work as the probe names it (probe.Cause).
type CauseIn struct {
	Name, Words, Fix, Note string
	Since                  time.Time
	// Line is an operator cause's line to change; zero when it has none.
	Line    stackcapture.Frame
	Callers []finalizerwatch.ForcedGCSite
	Growing bool
	Sites   []heapprofile.Site
}

// Build builds the page's document from in.
func Build(in *Input) *Data {
	d := &Data{
		Schema:        Schema,
		Time:          in.Now,
		HistoryCycles: HistoryCycles,
		RuntimeMode:   in.RuntimeMode,
		Links:         in.Links,
		Counters:      counters,
		Totals:        map[string]Totals{},
		LedgerCycles:  map[string]uint64{},
		History:       []Cycle{},
		Pauses:        []Pause{},
		Sites:         []Site{},
		Running:       []Running{},
		Firing:        []Event{},
		Events:        []Event{},
	}
	type siteAt struct {
		row     int
		suspect uint64
	}
	bySite := map[sitekey.Key][]siteAt{}
	in.History.eachRow(func(c *cycleRow) {
		i := len(d.History)
		d.History = append(d.History, Cycle{
			Cycle: c.cycle, Time: c.time, HeapLive: c.heapLive, HeapGoal: c.heapGoal, CPUFraction: c.gcCPU,
			Queues: Queues{Finalizer: queueRowOf(c.queues[0]), Cleanup: queueRowOf(c.queues[1])},
		})
		for _, s := range c.sites {
			bySite[s.key] = append(bySite[s.key], siteAt{i, s.suspect})
		}
	})
	in.History.eachEvent(func(e *memstats.Event) { d.Events = append(d.Events, eventOf(e)) })
	since := uint64(0)
	if len(d.History) > 0 {
		since = d.History[0].Cycle
	}
	sn := in.Ledger
	d.MoreCyclesNeeded = sn.MoreCyclesNeeded
	d.MoreSecondsNeeded = sn.MoreTimeNeeded.Round(time.Second).Seconds()
	g := in.GC
	d.GC = GC{
		Cycles: g.Cycles, Forced: g.ForcedCycles, ForcedPerMinute: g.ForcedPerMinute,
		HeapLive: g.HeapLive, HeapGoal: g.HeapGoal, GOGC: g.GOGC, MemoryLimit: g.MemoryLimit,
		CPUFraction: g.GCCPUFraction, PauseP50: g.PauseP50.Seconds(), PauseP99: g.PauseP99.Seconds(),
		PauseMax: g.PauseMax.Seconds(), PauseWindow: g.PauseWindow,
	}
	d.Queues = Queues{Finalizer: queueOf(&g.Finalizers), Cleanup: queueOf(&g.Cleanups)}
	for _, ps := range in.Pauses {
		if ps.Cycle >= since {
			d.Pauses = append(d.Pauses, Pause{Cycle: ps.Cycle, End: ps.End, Seconds: ps.Duration.Seconds()})
		}
	}
	for k := range sn.Kinds {
		ks := &sn.Kinds[k]
		d.LedgerCycles[finalizerwatch.Kind(k).String()] = sn.Cycles[k]
		d.Totals[finalizerwatch.Kind(k).String()] = Totals{Sites: ks.Sites, Registered: ks.Registered,
			Executed: ks.Executed, Outstanding: ks.Outstanding, Suspect: ks.Suspect, Dropped: ks.Totals.Dropped,
			Counts: countsOf(&ks.Counts)}
	}
	for i := range sn.Top {
		s := &sn.Top[i]
		ps := SiteOf(s, len(d.History))
		for _, at := range bySite[sitekey.Of(s)] {
			v := at.suspect
			ps.Suspects[at.row] = &v
		}
		d.Sites = append(d.Sites, ps)
	}
	for _, c := range sn.Running {
		d.Running = append(d.Running, Running{Kind: c.Kind.String(), Site: c.Site.Label(), Seconds: c.For.Seconds()})
	}
	for i := range in.Firing {
		d.Firing = append(d.Firing, eventOf(&in.Firing[i]))
	}
	d.Overflow = Overflow{Sites: sn.Overflow.Sites, Stacks: sn.Overflow.Stacks}
	d.GCCause.Causes = []Cause{}
	for _, c := range in.Causes {
		var callers []string
		if c.Line.Line != 0 {
			callers = []string{cut(c.Line.Label())}
		}
		callers = append(callers, callersOf(c.Callers)...)
		d.GCCause.Causes = append(d.GCCause.Causes, Cause{Detector: c.Name, Words: cut(c.Words),
			Fix: cut(c.Fix), Note: cut(c.Note), Callers: callers, Since: c.Since, Growing: c.Growing, Sites: heapSitesOf(c.Sites)})
	}
	h := in.Heap
	d.AllocatingSites = Allocating{WindowSeconds: h.Window.Seconds(),
		Allocating: heapSitesOf(h.Allocating), Growing: heapSitesOf(h.Growing)}
	return d
}

// SiteOf is the page's row of top site s, with room for the suspect
// counts of rows rows of history.
func SiteOf(s *finalizerwatch.SiteStats, rows int) Site {
	return Site{
		Kind: s.Kind.String(), Site: s.Site.Label(),
		Function: cut(s.Site.Function), File: cut(s.Site.File), Line: s.Site.Line,
		Resource: cut(s.Resource), Class: s.Class.String(), Verdict: Verdict(s), Words: Words(s),
		Growth:     s.Growth,
		Registered: s.Registered, Executed: s.Executed, Outstanding: s.Outstanding, Suspect: s.Suspect,
		Dropped:  s.Dropped,
		Counts:   countsOf(&s.Counts),
		Suspects: make([]*uint64, rows),
		Stack:    stackOf(s.Stack),
	}
}

// ledgerCounters are finalizerwatch.Counters, read once.
var ledgerCounters = finalizerwatch.Counters()

// counters is Data.Counters: ledgerCounters, described.
var counters = func() []Counter {
	var out []Counter
	for _, c := range ledgerCounters {
		out = append(out, Counter{Name: c.Name, Help: c.Help, Gauge: c.Gauge, Sparse: c.Sparse, Resource: c.Resource})
	}
	return out
}()

// countsOf is c's counters, in counters' order.
func countsOf(c *finalizerwatch.Counts) []uint64 {
	out := make([]uint64, 0, finalizerwatch.NumCounters)
	for i := range ledgerCounters {
		out = append(out, ledgerCounters[i].Value(c))
	}
	return out
}

func heapSitesOf(sites []heapprofile.Site) []HeapSite {
	out := make([]HeapSite, 0, len(sites))
	for i := range sites {
		s := &sites[i]
		path := ""
		if len(s.Path) > 0 {
			path = cut(s.PathString())
		}
		out = append(out, HeapSite{Site: s.Label(), Path: path, AllocBytesPerSecond: s.AllocBytesPerSecond,
			InUseBytes: s.InUseBytes, GrownBytes: s.GrownBytes, GrowingFor: s.GrowingFor, Stack: stackOf(s.UserStack())})
	}
	return out
}

func callersOf(cs []finalizerwatch.ForcedGCSite) []string {
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, 0, len(cs))
	for i := range cs {
		out = append(out, cut(fmt.Sprintf("%s (%d calls)", cs[i].Site.Label(), cs[i].Calls)))
	}
	return out
}

func queueOf(q *memstats.Queue) Queue {
	return Queue{Length: q.Length, DrainPerSecond: q.DrainPerSecond, Delay: q.Latency.Seconds()}
}

func queueRowOf(q queueRow) Queue {
	return Queue{Length: q.length, DrainPerSecond: q.drain, Delay: q.latency.Seconds()}
}

func eventOf(e *memstats.Event) Event {
	return Event{Detector: e.Detector, Firing: e.Firing, Value: e.Value, Threshold: e.Threshold,
		Since: e.Since, Time: e.Time, Kind: e.Kind, Site: cut(e.Site)}
}

func stackOf(st []stackcapture.Frame) []Frame {
	out := make([]Frame, 0, min(len(st), maxFrames))
	for i := range st {
		if i == maxFrames {
			break
		}
		out = append(out, Frame{Function: cut(st[i].Function), File: cut(st[i].File), Line: st[i].Line})
	}
	return out
}

// cut bounds s to maxString bytes (encoding/json makes any bytes
// valid UTF-8).
func cut(s string) string {
	if len(s) > maxString {
		return s[:maxString]
	}
	return s
}
