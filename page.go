package probe

import (
	"net/http"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/page"
)

// The live page: what the probe sees, for a person, without Prometheus.
// internal/page holds it (its files, its JSON document and the history
// it shows); the probe serves it and feeds it its one read (cycles.go).

// PagePath is where WithListenAddr's listener serves the live page, and
// where PageHandler is meant to be mounted. PageDataPath is the page's
// JSON document (PageData), relative to the page.
const (
	PagePath     = "/debug/gcprobe/"
	PageDataPath = page.DataPath // "data.json"
)

// PageSchema is the version of PageData's JSON.
const PageSchema = page.Schema // 1

// The history the probe keeps for the live page, in the probe, not in the
// browser, so that a reload keeps it: a ring of the last
// PageHistoryCycles rows, each one GC cycle or the cycles of
// PageHistoryStep, with the heap, the GC's CPU share, both queues and the
// suspects of that cycle's top sites, and a ring of the last PageEvents
// detector events. Memory is fixed once the rings are full.
const (
	// PageHistoryCycles is how many GC cycles of history the probe keeps
	// for the live page (/debug/gcprobe/): its charts and sparklines show
	// at most this many points. A cycle is recorded when the probe's
	// per-cycle read sees the runtime's GC count move; when several GC
	// cycles end between two reads (a burst of forced GCs) the row
	// stands for the last of them, while the pause chart, read from the
	// runtime's own per-cycle record (debug.ReadGCStats), still has one
	// point per cycle.
	PageHistoryCycles = page.HistoryCycles // 120
	// PageHistoryStep is the least time a row of the history stands for:
	// on a server that runs fifty GC cycles a second, a row is the last
	// cycle of each 2 s, so that the page's charts cover four minutes,
	// not two seconds; on one that runs a cycle a minute, a row is a
	// cycle, and the charts cover two hours.
	PageHistoryStep = page.HistoryStep // 2 * time.Second
	// PageEvents is how many detector events (firing and cleared) the
	// probe keeps for the live page.
	PageEvents = page.HistoryEvents // 64
)

// The live page's JSON document and its parts: PageData is the document
// served at PageDataPath; the others are its fields' types. They are
// internal/page's types (Data, GC, ...), where each field's meaning, JSON
// name and unit are documented.
type (
	// PageData is the live page's JSON document, served at PageDataPath
	// under the page: the page renders it and nothing else; scripts and
	// tests may read it too. Its fields are stable within a PageSchema
	// version.
	PageData = page.Data
	// PageGC is the GC as the sampler's latest round saw it.
	PageGC = page.GC
	// PageQueues are the finalizer and the cleanup queue.
	PageQueues = page.Queues
	// PageQueue is one queue: its length, drain rate and delay.
	PageQueue = page.Queue
	// PageCounter describes one of the ledger's counters
	// (finalizerwatch.Counter): the page draws a column per counter from
	// these.
	PageCounter = page.Counter
	// PageTotals is one kind's ledger summed.
	PageTotals = page.Totals
	// PageCycle is one GC cycle of the history.
	PageCycle = page.Cycle
	// PagePause is one GC cycle's stop-the-world time.
	PagePause = page.Pause
	// PageSite is one top site, with its counts, verdict, sparkline and
	// stack.
	PageSite = page.Site
	// PageFrame is one frame of a stack.
	PageFrame = page.Frame
	// PageRunning is a callback running now.
	PageRunning = page.Running
	// PageEvent is a detector event.
	PageEvent = page.Event
	// PageGCCause is why the GC works hard now.
	PageGCCause = page.GCCause
	// PageCause is one firing cause detector and the lines it points at.
	PageCause = page.Cause
	// PageAllocating is the heap profile's picture.
	PageAllocating = page.Allocating
	// PageHeapSite is one site of the heap profile.
	PageHeapSite = page.HeapSite
	// PageOverflow counts what the ledger's bounded tables refused.
	PageOverflow = page.Overflow
	// PageLinks are the probe's other handlers.
	PageLinks = page.Links
)

// pageMaxConcurrent bounds the documents built at once; a build reads the
// ledger's top sites (O(WithTopK)) and the history (O(PageHistoryCycles)).
const pageMaxConcurrent = 4

// PageHandler serves the live page: the top sites by the leak model with
// their class, growth, counts and a per-GC-cycle sparkline of suspects,
// each site's registration stack on click, a site that dropped files or
// connections without Close marked as a leak with what to do at its line
// (PageSite.Verdict and Words), and whether the runtime build mode is on;
// the finalizer and cleanup
// queues, GC pauses, heap live and goal and GC CPU per GC cycle; the
// callback running now; the detectors firing and their history; links to
// the pprof profile (and its text form) and to /metrics. Mount it at
// PagePath (/debug/gcprobe/, trailing slash: it serves a subtree), for
// example as an extra handler of controller-runtime's metrics server, where
// it gets the same authentication and authorization as /metrics:
//
//	ExtraHandlers: map[string]http.Handler{
//		probe.ProfilePath: p.ProfileHandler(),
//		probe.PagePath:    p.PageHandler(),
//	}
//
// WithListenAddr's listener serves it at PagePath itself.
//
// The handler serves, by the last element of the request's path: the page
// for a path ending in "/", its script and style, and PageDataPath, the
// JSON document the page reads (PageData; documented for scripts and
// tests). A path without the trailing slash is redirected to it; any other
// name is 404. GET and HEAD only. The history the page shows is kept by
// the probe (PageHistoryCycles cycles, PageEvents detector events) while
// it runs, so a reload keeps it. At most 4 documents are built at once
// (others wait up to 10 s, then 503); a document is bounded (WithTopK
// sites, stacks of 48 frames). Like ProfileHandler it serves before Start
// and while the probe runs, 503 after Stop; the handler of a nil or
// zero-value Probe answers 500.
func (p *Probe) PageHandler() http.Handler {
	if err := p.made("PageHandler"); err != nil {
		return unmadeHandler(err)
	}
	return p.guard(p.pageHandler())
}

// pageHandler is PageHandler without the guard, for Handler, which has
// its own.
func (p *Probe) pageHandler() http.Handler {
	return page.Handler(queue(pageMaxConcurrent, p.life.Done(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		page.ServeData(w, p.pageData(time.Now()))
	})))
}

// pageData builds the page's document from the probe's one read: the
// pauses from the oldest cycle the history holds.
func (p *Probe) pageData(now time.Time) *PageData {
	var r reading
	p.read(&r, readFor{stacks: true, causes: true, pauses: true, pausesSince: p.history.FirstCycle()})
	in := page.Input{
		Now:         now,
		RuntimeMode: finalizerwatch.RuntimeMode(),
		Links:       PageLinks{Profile: ProfilePath, ProfileText: ProfilePath + "?debug=1", Metrics: MetricsPath},
		Ledger:      &r.sn,
		GC:          &r.ms,
		Firing:      r.firing,
		Pauses:      r.pauses,
		Heap:        &r.cause.Heap,
		History:     p.history,
	}
	for i := range r.cause.Causes {
		c := &r.cause.Causes[i]
		in.Causes = append(in.Causes, page.CauseIn{Name: c.Name, Words: c.Words, Fix: c.Fix, Note: c.Note,
			Since: c.Since, Line: c.Line, Callers: c.Callers, Growing: c.Growing, Sites: c.Sites})
	}
	return page.Build(&in)
}
