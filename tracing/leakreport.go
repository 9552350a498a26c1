package tracing

import (
	"context"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
)

// Span and event names, contract: dashboards and alerts query them.
const (
	// SpanLeakReport is the periodic leak report.
	SpanLeakReport = "gcprobe.leak_report"
	// EventSite is a leak report's event for one call site.
	EventSite = "gcprobe.site"
	// SpanGCPause is one GC cycle's stop-the-world pause over the
	// threshold.
	SpanGCPause = "gcprobe.gc_pause"
	// SpanDetector carries one batch of detector events.
	SpanDetector = "gcprobe.detector"
	// EventDetector is one detector event on a SpanDetector span.
	EventDetector = "gcprobe.detector"
)

// OpenTelemetry semantic-convention attribute names (the code.* namespace
// as of semantic conventions 1.30), written out so that this package
// depends on the API alone.
const (
	keyCodeFunction   = attribute.Key("code.function.name")
	keyCodeFile       = attribute.Key("code.file.path")
	keyCodeLine       = attribute.Key("code.line.number")
	keyCodeStacktrace = attribute.Key("code.stacktrace")
)

// Site event attributes, besides the counters' (counterKeys).
const (
	keyKind        = attribute.Key("gcprobe.kind")
	keyResource    = attribute.Key("gcprobe.resource")
	keySuspect     = attribute.Key("gcprobe.suspect")
	keyMaxSurvived = attribute.Key("gcprobe.max_cycles_survived")
	keyClass       = attribute.Key("gcprobe.class")
	keyGrowth      = attribute.Key("gcprobe.growth")
)

// counters are the ledger's counters, and counterKeys their site event
// attributes, gcprobe.<name> (finalizerwatch.Counters); a kind's totals on
// the leak report span are gcprobe.<finalizers|cleanups>.<name>.
var (
	counters    = finalizerwatch.Counters()
	counterKeys = func() (keys [finalizerwatch.NumCounters]attribute.Key) {
		for i, c := range counters {
			keys[i] = attribute.Key("gcprobe." + c.Name)
		}
		return keys
	}()
)

// Leak report span attributes. The per-kind totals are
// "gcprobe.<finalizers|cleanups>.<total>", built with kindPrefix.
const (
	keyTopK          = attribute.Key("gcprobe.top_k")
	keySuspectCycles = attribute.Key("gcprobe.suspect_cycles")
	keySitesReported = attribute.Key("gcprobe.sites_reported")
	keyMoreCycles    = attribute.Key("gcprobe.more_cycles_needed")
	keyGCCycles      = attribute.Key("gcprobe.gc.cycles")
	keyHeapLive      = attribute.Key("gcprobe.heap.live_bytes")
	keyFinQueue      = attribute.Key("gcprobe.finalizers.queue_length")
	keyClnQueue      = attribute.Key("gcprobe.cleanups.queue_length")
	keyActive        = attribute.Key("gcprobe.detectors.active")
)

// kindPrefix is the namespace of a kind's totals on the leak report span.
func kindPrefix(k finalizerwatch.Kind) string {
	if k == finalizerwatch.KindCleanup {
		return "gcprobe.cleanups."
	}
	return "gcprobe.finalizers."
}

// ReportNow emits one gcprobe.leak_report span, as the running reporter
// does every leak report interval, as a child of any span in ctx. It is
// safe to call whether or not the reporter runs, also after Stop.
func (r *Reporter) ReportNow(ctx context.Context) {
	w := r.cfg.watcher
	_, span := r.tracer.Start(ctx, SpanLeakReport, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	if !span.IsRecording() {
		// Sampled out: building the report would be wasted work.
		return
	}

	// One read of the ledger: the top K sites and the totals, from the
	// ranking of the current GC cycle.
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{TopK: r.cfg.topK, Stacks: true})
	attrs := make([]attribute.KeyValue, 0, 32)
	attrs = append(attrs,
		keyTopK.Int(r.cfg.topK),
		keySuspectCycles.Int(w.SuspectCycles()),
		keyMoreCycles.Int(sn.MoreCyclesNeeded),
	)
	for _, k := range finalizerwatch.Kinds {
		t := sn.Kinds[k].Totals
		p := kindPrefix(k)
		attrs = append(attrs, attribute.Int(p+"sites", t.Sites))
		for _, c := range counters {
			attrs = append(attrs, attribute.Int64(p+c.Name, clampInt64(c.Value(&t.Counts))))
		}
		attrs = append(attrs,
			attribute.Int64(p+"suspect", clampInt64(t.Suspect)),
			attribute.Int64(p+"cycles", clampInt64(sn.Cycles[k])),
		)
	}
	var snap memstats.Snapshot
	if r.snapshot(&snap) {
		active := r.cfg.sampler.Active(nil)
		names := make([]string, len(active))
		for i, e := range active {
			names[i] = e.Detector
		}
		attrs = append(attrs,
			keyGCCycles.Int64(clampInt64(snap.Cycles)),
			keyHeapLive.Int64(clampInt64(snap.HeapLive)),
			keyFinQueue.Int64(clampInt64(snap.Finalizers.Length)),
			keyClnQueue.Int64(clampInt64(snap.Cleanups.Length)),
			keyActive.StringSlice(names),
		)
	}

	reported := 0
	for _, s := range sn.Top {
		if !reportsSite(&s) {
			continue
		}
		span.AddEvent(EventSite, trace.WithAttributes(siteAttributes(&s)...))
		reported++
	}
	attrs = append(attrs, keySitesReported.Int(reported))
	span.SetAttributes(attrs...)
}

// reportsSite reports whether a top site gets an event: one with
// outstanding registrations, or one whose files or connections were
// dropped without Close (their finalizers ran: nothing is outstanding,
// but each was a descriptor leaked until the GC came). At any other,
// everything registered has run or been cleared: nothing there leaks,
// however busy the site is.
func reportsSite(s *finalizerwatch.SiteStats) bool {
	return s.Outstanding > 0 || s.Dropped > 0
}

// siteAttributes are the attributes of one site's event.
func siteAttributes(s *finalizerwatch.SiteStats) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10+len(counters))
	attrs = append(attrs,
		keyCodeFunction.String(s.Site.Function),
		keyCodeFile.String(s.Site.File),
		keyCodeLine.Int(s.Site.Line),
		keyCodeStacktrace.String(FormatStack(s.Stack)),
		keyKind.String(s.Kind.String()),
	)
	if s.Resource != "" {
		attrs = append(attrs, keyResource.String(s.Resource))
	}
	for i, c := range counters {
		attrs = append(attrs, counterKeys[i].Int64(clampInt64(c.Value(&s.Counts))))
	}
	return append(attrs,
		keySuspect.Int64(clampInt64(s.Suspect)),
		keyMaxSurvived.Int(MaxCyclesSurvived(&s.Survived)),
		keyClass.String(s.Class.String()),
		keyGrowth.Int64(clampInt64(s.Growth)),
	)
}

// MaxCyclesSurvived returns how many GC cycles the oldest outstanding
// registration counted in survived has survived: the index of the last
// non-empty bucket, or 0 when all are empty. The last bucket counts
// finalizerwatch.AgeBuckets-1 cycles or more, so that value is a lower
// bound.
func MaxCyclesSurvived(survived *[finalizerwatch.AgeBuckets]uint64) int {
	for age := len(survived) - 1; age > 0; age-- {
		if survived[age] > 0 {
			return age
		}
	}
	return 0
}

// FormatStack formats frames, innermost first, the way a Go panic prints a
// goroutine's stack: for each frame, the function on one line and a tab,
// file:line on the next, each line ending in a newline. It is the value of
// the code.stacktrace attribute.
func FormatStack(frames []stackcapture.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		fn := f.Function
		if fn == "" {
			fn = "unknown"
		}
		b.WriteString(fn)
		b.WriteString("\n\t")
		b.WriteString(f.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(f.Line))
		b.WriteByte('\n')
	}
	return b.String()
}

// clampInt64 converts a count to the int64 an attribute holds.
func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
