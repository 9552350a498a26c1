package probe

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"time"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

// WithHeapProfileOptions passes options to the probe's heapprofile.Profiler,
// which reads the runtime's heap profile by deltas to name the allocating
// and growing sites (by default every heapprofile.DefaultInterval, bounded
// by heapprofile.DefaultMaxBuckets). Its limits are heapprofile's.
func WithHeapProfileOptions(opts ...heapprofile.Option) Option {
	return func(c *config) error {
		c.heapOpts = append(c.heapOpts, opts...)
		return nil
	}
}

// newHeapProfile makes the probe's heap profiler.
func newHeapProfile(cfg *config, op *operatorCauses) (*heapprofile.Profiler, error) {
	h, err := heapprofile.New(append(op.options(), cfg.heapOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	return h, nil
}

// startHeapProfile reads the heap profile now and then every interval, on
// a goroutine that Stop ends.
func (p *Probe) startHeapProfile() {
	p.goSafe("heap profile", func() {
		t := time.NewTicker(p.heap.Interval())
		defer t.Stop()
		done := p.life.Done()
		read := func() {
			p.heap.Sample()
			p.operator.judge(p.heap.Snapshot(), time.Now(), p.eventLogger())
		}
		read()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	})
}

// HeapProfile returns the probe's heap profiler, whose snapshot names the
// allocating and growing sites.
func (p *Probe) HeapProfile() *heapprofile.Profiler { return p.heap }

// AllocsProfilePath is where WithListenAddr serves the delta allocation
// profile (AllocsProfileHandler).
const AllocsProfilePath = pprofexporter.AllocsPath

// AllocsProfileHandler serves the heap profiler's top allocating and
// growing sites over its latest window as a pprof profile
// (pprofexporter.AllocsProfile: alloc_space by default, a delta rather than
// the runtime's since-start totals), for go tool pprof; mount it at
// AllocsProfilePath. With ?seconds=N it serves the allocations of the
// next N seconds instead (pprofexporter.AllocsProfilerHandler), as
// continuous profilers ask for a delta. Like ProfileHandler it serves
// before Start and while the probe runs, and answers 503 once it is
// stopped (a delta waiting when Stop is called ends at once, 503); the
// handler of a nil or zero-value Probe answers 500.
func (p *Probe) AllocsProfileHandler() http.Handler {
	if err := p.made("AllocsProfileHandler"); err != nil {
		return unmadeHandler(err)
	}
	return p.guard(p.untilStop(pprofexporter.AllocsProfilerHandler(p.heap)))
}

// maxBlamed is how many sites a cause names, the first to look at.
const maxBlamed = 3

// GCCause says why the GC works hard: the cause detectors firing now, each
// in words with the sites to look at first, and the heap profile's top
// sites.
type GCCause struct {
	// Causes are the cause detectors firing now (memstats.IsCause), each
	// with the sites it blames. A healthy program has none.
	Causes []Cause
	// Heap is the heap profiler's latest picture: the top allocating
	// sites over its window and the sites whose in-use bytes grow.
	Heap heapprofile.Snapshot
}

// Cause is one cause of GC work named now, a firing cause detector or an
// operator's own cause, with the lines it points at and the fix.
type Cause struct {
	// Event is the detector's firing event, Value current.
	Event memstats.Event
	// Words is the cause in words with the number that decided it
	// (memstats.Event.Cause).
	Words string
	// Growing reports that Sites are the growing sites (their in-use
	// bytes rise) rather than the allocating ones.
	Growing bool
	// Sites are the heap profile's sites to look at first for this
	// cause, at most three: the top allocating sites for
	// allocation_driven and assist_heavy, the growing sites for
	// live_heap_growth, and the growing (else the allocating) sites for
	// memory_limit_pressure. None for stopping_latency, which is about
	// goroutines that do not yield, not about memory.
	Sites []heapprofile.Site
	// Fix is what to change, in words (memstats.Event.Fix, or the
	// operator cause's, by API name).
	Fix string
	// Note says why Sites is empty where a cause would name lines: the
	// heap profile is off (runtime.MemProfileRate = 0), or has not been
	// read over a window yet; for forced_gc outside the runtime build
	// mode, how to find the line.
	Note string
	// Operator reports an operator's own cause, judged from the heap
	// profile's stack signatures (heapprofile.JudgeOperator) rather than
	// fired by a memstats detector: Event is then zero, and Line names
	// its line where it has one.
	Operator bool
	// Name is the cause's name: the detector's (memstats.Detector*), or
	// an operator cause's (heapprofile.Cause*).
	Name string
	// Value and Threshold are the number that decided the cause and its
	// threshold (the detector's event's, or heapprofile.OperatorCause's),
	// and Since when it began.
	Value, Threshold float64
	Since            time.Time
	// Line is an operator cause's line to change (the reconciler's List
	// or Get for cache_deep_copy); zero when it has none.
	Line stackcapture.Frame
	// Callers are, for forced_gc in the runtime build mode, the lines
	// that called runtime.GC or debug.FreeOSMemory, most calls first, at
	// most three (finalizerwatch.ForcedGCSites), each with its calls
	// since CallersSince (a minute or two ago; zero: since the process
	// began), so that a line that forced cycles at start-up is not named
	// before the loop that forces them now.
	Callers      []finalizerwatch.ForcedGCSite
	CallersSince time.Time
}

// gcCause builds the report's GCCause from the detectors firing now and
// the heap profile.
func (p *Probe) gcCause(firing []memstats.Event) GCCause {
	g := GCCause{Heap: p.heap.Snapshot()}
	for _, e := range firing {
		if !memstats.IsCause(e.Detector) {
			continue
		}
		c := Cause{Event: e, Name: e.Detector, Words: e.Cause(), Fix: e.Fix,
			Value: e.Value, Threshold: e.Threshold, Since: e.Since}
		lines := true
		switch e.Detector {
		case memstats.DetectorAllocationDriven, memstats.DetectorAssistHeavy:
			c.Sites = firstSites(g.Heap.Allocating)
		case memstats.DetectorLiveHeapGrowth:
			c.Sites, c.Growing = firstSites(g.Heap.Growing), true
		case memstats.DetectorMemoryLimitPressure:
			c.Sites, c.Growing = firstSites(g.Heap.Growing), true
			if len(c.Sites) == 0 {
				c.Sites, c.Growing = firstSites(g.Heap.Allocating), false
			}
		case memstats.DetectorForcedGC:
			lines = false
			if finalizerwatch.RuntimeModeForcedGC() {
				all, since := p.forced.rank(finalizerwatch.ForcedGCSites(nil), time.Now())
				c.Callers, c.CallersSince = all[:min(len(all), maxBlamed)], since
			} else {
				c.Note = "build in the runtime mode (finalizercheck -runtime) for the line that calls runtime.GC or debug.FreeOSMemory; meanwhile, search the program and its dependencies for them"
			}
		default:
			lines = false
		}
		if lines && len(c.Sites) == 0 {
			c.Note = heapNote(&g.Heap)
		}
		g.Causes = append(g.Causes, c)
	}
	g.Causes = p.operator.causes(g.Causes)
	return g
}

// causeLine is the first line a firing cause points at, for its log
// line: the same the Report and the page name first; "" for other events.
func (p *Probe) causeLine(e memstats.Event) string {
	if !e.Firing || !memstats.IsCause(e.Detector) {
		return ""
	}
	g := p.gcCause([]memstats.Event{e})
	if len(g.Causes) == 0 {
		return ""
	}
	return g.Causes[0].firstLine()
}

// GCCauseNames returns the names of the causes of GC work the Report names
// now: the firing cause detectors (memstats.CauseDetectors) and an
// operator's own causes (heapprofile.Cause*), for reconciletrace.WithCauses;
// nil when there is none. It reads no heap profile and allocates only the
// slice: cheap enough for every reconcile. A nil or zero-value Probe has
// none.
func (p *Probe) GCCauseNames() []string {
	if p.made("GCCauseNames") != nil {
		return nil
	}
	var buf [8]memstats.Event
	var names []string
	for _, e := range p.sampler.Active(buf[:0]) {
		if memstats.IsCause(e.Detector) {
			names = append(names, e.Detector)
		}
	}
	return p.operator.names(names)
}

// causeLabels yields the causes the Report names now, each with its first
// line: gcprobe_gc_cause's series.
func (p *Probe) causeLabels(yield func(cause, site string) bool) {
	g := p.gcCause(p.sampler.Active(nil))
	for _, c := range g.Causes {
		if !yield(c.Name, c.firstLabel()) {
			return
		}
	}
}

// firstLine is the first line the cause points at, as the Report names
// it; "" for none.
func (c *Cause) firstLine() string {
	switch {
	case c.Line.Line != 0:
		return fmt.Sprintf("%s %s:%d", c.Line.Function, filepath.Base(c.Line.File), c.Line.Line)
	case len(c.Callers) > 0:
		return callerLine(&c.Callers[0])
	case len(c.Sites) > 0:
		return siteLine(&c.Sites[0])
	}
	return ""
}

// firstLabel is firstLine as a bounded label ("function file:line").
func (c *Cause) firstLabel() string {
	switch {
	case c.Line.Line != 0:
		return c.Line.Label()
	case len(c.Callers) > 0:
		return c.Callers[0].Site.Label()
	case len(c.Sites) > 0:
		return c.Sites[0].Label()
	}
	return ""
}

// runWait is the runnable goroutines' mean wait for a CPU, as the GC work
// line says it; measured only while stopping the world is slow.
func runWait(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(", waiting %v on average to run", d.Round(time.Microsecond))
}

// heapNote says why the heap profile names no line now.
func heapNote(h *heapprofile.Snapshot) string {
	if t := h.StatusText(); t != "" {
		return t
	}
	if h.Window == 0 {
		return "the heap profile has not been read over a window yet: the lines come with its next read"
	}
	return "no line stands out in the heap profile's latest window"
}

func firstSites(s []heapprofile.Site) []heapprofile.Site {
	return s[:min(len(s), maxBlamed)]
}

// writeGCCause writes the GC's work over the rate window, then each cause
// with its sites, or that there is none.
func (r Report) writeGCCause(b *bytes.Buffer) {
	w := &r.GC.Work
	fmt.Fprintf(b, "GC work over %v: %.0f cycles/min (%.0f forced), allocating %s/s; GC CPU: assist %.1f%%, dedicated %.1f%%, idle %.1f%%, pause %.1f%%\n",
		w.Window.Round(time.Second), w.CyclesPerMinute, w.ForcedCyclesPerMinute, bytesString(uint64(w.AllocBytesPerSecond)),
		100*w.AssistFraction, 100*w.DedicatedFraction, 100*w.IdleFraction, 100*w.PauseFraction)
	limit := "off"
	if l := r.GC.MemoryLimit; l > 0 && l < math.MaxInt64 {
		limit = bytesString(l)
	}
	limiter := "never engaged"
	if w.LimiterEngaged {
		limiter = fmt.Sprintf("engaged (cycle %d)", w.LimiterLastEnabled)
	} else if w.LimiterLastEnabled > 0 {
		limiter = fmt.Sprintf("last engaged in cycle %d", w.LimiterLastEnabled)
	}
	fmt.Fprintf(b, "stop-the-world %v in %d pauses (stopping %v); heap goal set by %s (GOGC %d, memory limit %s, GC CPU limiter %s); scan: heap %s, stacks %s, globals %s; %d goroutines%s; live heap %+.0f%% over %v (%d cycles, %s)\n",
		w.StopTheWorld.Round(time.Microsecond), w.StopTheWorldCount, w.Stopping.Round(time.Microsecond),
		w.GoalSetBy, r.GC.GOGC, limit, limiter,
		bytesString(w.ScanHeap), bytesString(w.ScanStack), bytesString(w.ScanGlobals), w.Goroutines,
		runWait(w.RunnableWait), 100*w.LiveGrowth, w.LiveSpan.Round(time.Second), w.LiveCycles,
		map[bool]string{true: "rising", false: "not rising"}[w.LiveRising])
	if len(r.GCCause.Causes) == 0 {
		b.WriteString("GC cause: none (no cause detector firing)\n")
	}
	for _, c := range r.GCCause.Causes {
		if c.Operator {
			fmt.Fprintf(b, "GC cause: %s: %s\n", c.Name, c.Words)
		} else {
			fmt.Fprintf(b, "GC cause: %s\n", c.Words)
		}
		if c.Fix != "" {
			fmt.Fprintf(b, "  fix: %s\n", c.Fix)
		}
		if c.Note != "" {
			fmt.Fprintf(b, "  note: %s\n", c.Note)
		}
		if c.Line.Line != 0 {
			fmt.Fprintf(b, "  at %s\n", c.firstLine())
		}
		for _, f := range c.Callers {
			since := "since the process began"
			if !c.CallersSince.IsZero() {
				since = fmt.Sprintf("in the latest %v", r.GC.Time.Sub(c.CallersSince).Round(time.Second))
			}
			fmt.Fprintf(b, "  called at %s: %d calls %s\n", callerLine(&f), f.Calls, since)
		}
		for _, s := range c.Sites {
			fmt.Fprintf(b, "  look at %s: ", siteLine(&s))
			if c.Growing {
				fmt.Fprintf(b, "%s in use, +%s over the latest %d windows\n",
					bytesString(uint64(max(s.InUseBytes, 0))), bytesString(uint64(max(s.GrownBytes, 0))), s.GrowingFor)
			} else {
				fmt.Fprintf(b, "%s/s allocated over the latest %v\n",
					bytesString(uint64(max(s.AllocBytesPerSecond, 0))), r.GCCause.Heap.Window.Round(time.Millisecond))
			}
			writeSiteStack(b, &s)
		}
	}
	if t := r.GCCause.Heap.StatusText(); t != "" && len(r.GCCause.Causes) == 0 {
		fmt.Fprintf(b, "heap profile: %s\n", t)
	}
	r.writeAllocating(b)
}

// writeAllocating writes the heap profile's top allocating and growing
// lines over its latest window, whatever the causes: the live page lists
// them too, and the Report names every line the page does.
func (r Report) writeAllocating(b *bytes.Buffer) {
	h := &r.GCCause.Heap
	if len(h.Allocating) > 0 {
		fmt.Fprintf(b, "allocating lines over the latest %v:\n", h.Window.Round(time.Millisecond))
		for i := range h.Allocating {
			s := &h.Allocating[i]
			fmt.Fprintf(b, "  %s/s %s\n", bytesString(uint64(max(s.AllocBytesPerSecond, 0))), siteLine(s))
		}
	}
	if len(h.Growing) > 0 {
		b.WriteString("growing lines (in-use bytes):\n")
		for i := range h.Growing {
			s := &h.Growing[i]
			fmt.Fprintf(b, "  +%s over %d windows, %s in use: %s\n", bytesString(uint64(max(s.GrownBytes, 0))), s.GrowingFor,
				bytesString(uint64(max(s.InUseBytes, 0))), siteLine(s))
		}
	}
}

// callerLine is a forced GC's calling line as the Report names it; the
// entry without a line says why it has none.
func callerLine(f *finalizerwatch.ForcedGCSite) string {
	if f.Site.Line == 0 {
		if f.Site.File != "" {
			return f.Site.Function + " (" + f.Site.File + ")"
		}
		return f.Site.Function
	}
	return fmt.Sprintf("%s %s:%d", f.Site.Function, filepath.Base(f.Site.File), f.Site.Line)
}

// siteLine is a heap site as the Report names it: "function file:line",
// and the path down to the allocation when it has one.
func siteLine(s *heapprofile.Site) string {
	if s.Frame.File == "" {
		return s.Label() // the runtime's shared site
	}
	if len(s.Path) > 0 {
		// The path begins with the site's file:line.
		return s.Frame.Function + " " + s.PathString()
	}
	return fmt.Sprintf("%s %s:%d", s.Frame.Function, filepath.Base(s.Frame.File), s.Frame.Line)
}

// writeSiteStack writes the first callers of a site under it, the
// runtime's frames (a goroutine's runtime.goexit) left out: a user cannot
// change them.
func writeSiteStack(b *bytes.Buffer, s *heapprofile.Site) {
	st := s.UserStack()
	for i, f := range st {
		if i == 0 {
			continue // the site itself
		}
		if i > 4 {
			fmt.Fprintf(b, "      ... %d more frames\n", len(st)-i)
			break
		}
		fmt.Fprintf(b, "      %s %s:%d\n", f.Function, filepath.Base(f.File), f.Line)
	}
}
