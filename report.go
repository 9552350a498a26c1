package probe

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/page"
	"github.com/gcprobe/probe/memstats"
)

// Report is the probe's current picture: the GC and its queues, the
// ledger's totals and its top sites with their stacks, and the detectors
// firing now.
type Report struct {
	Time time.Time
	// GC is the sampler's latest snapshot.
	GC memstats.Snapshot
	// Finalizers and Cleanups are the ledger summed over all sites.
	Finalizers, Cleanups finalizerwatch.Totals
	// Top are the sites most likely to leak, most likely first (at most
	// WithTopK of them), as finalizerwatch's Snapshot.Top ranks them: growing
	// sites first, then stable (long-lived but flat), then churn; each
	// SiteStats.Class says which.
	Top []finalizerwatch.SiteStats
	// MoreCycles is how many more GC cycles must pass before the ranking
	// can tell a leak from a cache (finalizerwatch.Snapshot.MoreCyclesNeeded);
	// 0 once enough have.
	MoreCycles int
	// MoreTime is how much longer, at least, the probe must run before a
	// registration can be old enough to be a leak suspect (WithSuspectAge;
	// finalizerwatch.Snapshot.MoreTimeNeeded); 0 once it has.
	MoreTime time.Duration
	// Firing are the detectors firing now. A finalizer_blocked event names
	// the callback that blocks (Event.Kind, Event.Site).
	Firing []memstats.Event
	// Running are the watched finalizers and cleanups running now, the
	// longest running first (finalizerwatch.Snapshot.Running).
	Running []finalizerwatch.RunningCallback
	// Overflow counts what the ledger's bounded tables refused.
	Overflow finalizerwatch.Overflow
	// RuntimeMode reports that the binary was built in the runtime build
	// mode (finalizercheck -runtime): the ledger counts every registration
	// in the binary, the standard library's included, not only those made
	// through finalizerwatch.
	RuntimeMode bool
	// GCCause says why the GC works hard: the cause detectors firing
	// now, each with the lines to look at first (report_gccause.go).
	GCCause GCCause
}

// Report returns the current picture. It symbolizes the top sites' stacks
// (once per site) and allocates; call it from a report loop or a handler,
// not a hot path. On a nil or zero-value Probe (not made by New or Start)
// it logs an error through slog's default logger and returns an empty
// Report.
func (p *Probe) Report() Report {
	if err := p.made("Report"); err != nil {
		logUnmade(err)
		return Report{Time: time.Now()}
	}
	// One fresh read (exact counts; a report is rare) gives the totals,
	// the top sites, the running callbacks, the overflow, the detectors
	// firing and the causes of GC work.
	var r reading
	p.read(&r, readFor{fresh: true, stacks: true, causes: true})
	return Report{
		Time:       time.Now(),
		GC:         r.ms,
		Finalizers: r.sn.Kinds[finalizerwatch.KindFinalizer].Totals,
		Cleanups:   r.sn.Kinds[finalizerwatch.KindCleanup].Totals,
		Top:        r.sn.Top,
		MoreCycles: r.sn.MoreCyclesNeeded,
		MoreTime:   r.sn.MoreTimeNeeded,
		Firing:     r.firing,
		Running:    r.sn.Running,
		Overflow:   r.sn.Overflow,

		RuntimeMode: finalizerwatch.RuntimeMode(),
		GCCause:     r.cause,
	}
}

// String returns the text table that WriteTo writes, so that
// fmt.Println(p.Report()) prints it.
func (r Report) String() string {
	var b strings.Builder
	r.WriteTo(&b) // a strings.Builder never fails
	return b.String()
}

// WriteTo writes r as a small text table (GC, queues, detectors, top
// sites with their class) for a terminal or a log, and returns the bytes
// written. A site that dropped a file, connection, os.Root or os.Process
// without Close (SiteStats.Dropped) is a leak whatever its Class: its
// class column says "dropped", and a line after the table says, from its
// whole site label, what was dropped and what to do there, as the live
// page does.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	g := r.GC
	fmt.Fprintf(&b, "gcprobe %s  GC cycles %d (forced %d, %.1f/min)  heap live %s / goal %s  GC CPU %.1f%%\n",
		r.Time.Format(time.TimeOnly), g.Cycles, g.ForcedCycles, g.ForcedPerMinute,
		bytesString(g.HeapLive), bytesString(g.HeapGoal), 100*g.GCCPUFraction)
	fmt.Fprintf(&b, "GC pauses over %d cycles: p50 %v  p99 %v  max %v\n", g.PauseWindow, g.PauseP50, g.PauseP99, g.PauseMax)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "queue\tlength\tgrowth/s\tlatency\t")
	watched := "watched: "
	for _, c := range reportColumns {
		fmt.Fprintf(tw, "%s%s\t", watched, c.name)
		watched = ""
	}
	fmt.Fprintln(tw)
	for _, q := range []struct {
		name string
		q    memstats.Queue
		t    finalizerwatch.Totals
	}{{"finalizers", g.Finalizers, r.Finalizers}, {"cleanups", g.Cleanups, r.Cleanups}} {
		fmt.Fprintf(tw, "%s\t%d\t%+.1f\t%v\t", q.name, q.q.Length, q.q.GrowthPerSecond, q.q.Latency.Round(time.Microsecond))
		// The columns read a SiteStats: the kind's, as far as Totals has it.
		t := finalizerwatch.SiteStats{Kind: q.t.Kind, Counts: q.t.Counts, Suspect: q.t.Suspect}
		for _, c := range reportColumns {
			fmt.Fprintf(tw, "%d\t", c.value(&t))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if r.RuntimeMode {
		b.WriteString("runtime build mode: every registration in the binary is counted, the standard library's included\n")
	}
	if n := r.Finalizers.ClearedOutside; n > 0 {
		// Not outstanding, and not cleared through the watcher either:
		// see finalizerwatch.SiteStats.ClearedOutside.
		fmt.Fprintf(&b, "finalizers found cleared or replaced outside finalizerwatch (runtime.SetFinalizer called directly): %d\n", n)
	}
	if len(r.Firing) > 0 {
		b.WriteString("firing:")
		for _, e := range r.Firing {
			fmt.Fprintf(&b, " %s (%.3g, threshold %.3g, since %s", e.Detector, e.Value, e.Threshold, e.Since.Format(time.TimeOnly))
			if e.Site != "" {
				fmt.Fprintf(&b, ", %s %s", e.Kind, e.Site)
			}
			b.WriteByte(')')
		}
		b.WriteByte('\n')
	}
	r.writeRunning(&b)
	r.writeGCCause(&b)
	if r.MoreCycles > 0 || r.MoreTime > 0 {
		fmt.Fprintf(&b, "too early to tell leaks from caches: %s\n", tooEarly(r.MoreCycles, r.MoreTime))
		// The count waits while a queue is backed up (issue 28): say so,
		// or a user watching "GC cycles" climb takes it for a bug.
		b.WriteString("  (a GC cycle counts once the finalizer and cleanup goroutines have caught up with it: while a queue is backed up, the count waits)\n")
	}
	if len(r.Top) > 0 {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprint(tw, "top sites\tkind\tclass\tgrowth\t")
		for _, c := range reportColumns {
			fmt.Fprintf(tw, "%s\t", c.name)
		}
		fmt.Fprintln(tw)
		for _, s := range r.Top {
			growth := "-"
			if s.Class == finalizerwatch.ClassGrowing {
				growth = fmt.Sprintf("+%d", s.Growth)
			}
			res := ""
			if s.Resource != "" {
				res = " (" + s.Resource + ")"
			}
			fmt.Fprintf(tw, "%s %s:%d%s\t%s\t%s\t%s\t", s.Site.Function, filepath.Base(s.Site.File), s.Site.Line, res,
				s.Kind, page.Verdict(&s), growth)
			for _, c := range reportColumns {
				fmt.Fprintf(tw, "%d\t", c.value(&s))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		// A dropped site is a leak at its line, as the live page says it:
		// the sentence, after the whole site label (the path in full, so
		// that the line is found without the table's short form).
		for _, s := range r.Top {
			if s.Dropped > 0 {
				fmt.Fprintf(&b, "leak at %s: %s\n", s.Site.Label(), page.DroppedWords(&s))
			}
			// A growing site whose resource says what grows (the
			// runtime build mode's HTTP client connections: a response
			// body not closed).
			if s.Leak != "" {
				fmt.Fprintf(&b, "leak at %s: %s\n", s.Site.Label(), s.Leak)
			}
		}
	}
	if all, top := r.Finalizers.Dropped+r.Cleanups.Dropped, topDropped(r.Top); all > top {
		// Dropped does not rank a site: a line that drops a few files
		// among many busier ones may be outside the top sites.
		fmt.Fprintf(&b, "and %d more dropped without Close at sites outside the top %d (WithTopK shows more)\n", all-top, len(r.Top))
	}
	if r.Overflow.Sites > 0 || r.Overflow.Stacks > 0 {
		fmt.Fprintf(&b, "overflow: %d registrations without a site of their own, %d stacks not kept\n", r.Overflow.Sites, r.Overflow.Stacks)
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// topDropped sums the Dropped counts of top.
func topDropped(top []finalizerwatch.SiteStats) uint64 {
	var n uint64
	for i := range top {
		n += top[i].Dropped
	}
	return n
}

// reportColumns are the counters WriteTo shows, in their order, in the
// top sites table and, of each kind, in the queue table's watched columns:
// finalizerwatch.SummaryCounters, named as it names them, then suspect. A
// per-site counter added to finalizerwatch.Counts is in the Report's Top
// and totals as it is added there, and in these tables if it is a summary
// counter.
var reportColumns = func() []reportColumn {
	var cols []reportColumn
	for _, c := range finalizerwatch.SummaryCounters() {
		cols = append(cols, reportColumn{c.Name, func(s *finalizerwatch.SiteStats) uint64 { return c.Value(&s.Counts) }})
	}
	return append(cols, reportColumn{"suspect", func(s *finalizerwatch.SiteStats) uint64 { return s.Suspect }})
}()

// reportColumn is a column of reportColumns: its name and its value at a
// site.
type reportColumn struct {
	name  string
	value func(*finalizerwatch.SiteStats) uint64
}

func bytesString(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// tooEarly says what the ledger still needs before it can tell a leak
// from a cache: cycles, time, or both.
func tooEarly(cycles int, d time.Duration) string {
	switch {
	case d <= 0:
		return fmt.Sprintf("%d more GC cycle(s) needed", cycles)
	case cycles <= 0:
		return fmt.Sprintf("about %v more needed", d.Round(time.Second))
	}
	return fmt.Sprintf("%d more GC cycle(s) and about %v needed", cycles, d.Round(time.Second))
}

// maxRunningLines bounds the "running now" lines of Report.WriteTo.
const maxRunningLines = 10

// writeRunning writes the callbacks running now, longest first, at most
// maxRunningLines of them.
func (r Report) writeRunning(b *bytes.Buffer) {
	for i, c := range r.Running {
		if i == maxRunningLines {
			fmt.Fprintf(b, "running now: %d more\n", len(r.Running)-i)
			break
		}
		fmt.Fprintf(b, "running now: %s %s:%d (%s) for %v\n", c.Site.Function, filepath.Base(c.Site.File), c.Site.Line,
			c.Kind, c.For.Round(time.Millisecond))
	}
}
