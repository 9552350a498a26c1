package reconciletrace

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/heapprofile"
)

// Allocation-site attributes, set when the reconcile overlapped a GC cycle
// and the wrapper has a heap profile (WithHeapProfile).
const (
	// EventAllocSite is one of the heap profile's top allocating sites,
	// an event on a reconcile's span.
	EventAllocSite = "gcprobe.alloc_site"

	keyAllocSites       = attribute.Key("gcprobe.gc.alloc_sites")
	keyAllocSitesWindow = attribute.Key("gcprobe.gc.alloc_sites_window_ns")
	keyCodeFunction     = attribute.Key("code.function")
	keyCodeFilepath     = attribute.Key("code.filepath")
	keyCodeLineno       = attribute.Key("code.lineno")
	keyAllocRate        = attribute.Key("gcprobe.alloc.bytes_per_second")
	keyAllocBytes       = attribute.Key("gcprobe.alloc.bytes")
	keyCauses           = attribute.Key("gcprobe.gc.causes")
)

// maxAllocSites is how many allocating sites a span names.
const maxAllocSites = 3

// WithHeapProfile gives the wrapper the heap profiler's snapshot (pass a
// heapprofile.Profiler's Snapshot method, such as the probe's
// HeapProfile().Snapshot): a reconcile that overlapped a GC cycle then
// names the top allocating sites of the profiler's latest window, the
// lines whose allocation drove those cycles, as the span's
// gcprobe.gc.alloc_sites attribute and one gcprobe.alloc_site event each.
// The profiler's window is its read interval, seconds, usually longer than
// a reconcile: the sites are those of the GC windows the reconcile fell
// in, not the reconcile's own allocations. fn must not be nil.
func WithHeapProfile(fn func() heapprofile.Snapshot) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("reconciletrace: WithHeapProfile: nil function")
		}
		c.heap = fn
		return nil
	}
}

// addAllocSites names the top allocating sites on span when the reconcile
// overlapped a GC cycle.
func addAllocSites(span trace.Span, heap func() heapprofile.Snapshot, start, end gcReading) {
	if heap == nil || end.cycles == start.cycles {
		return
	}
	sn := heap()
	top := sn.Allocating[:min(len(sn.Allocating), maxAllocSites)]
	if len(top) == 0 {
		return
	}
	labels := make([]string, len(top))
	for i := range top {
		s := &top[i]
		labels[i] = fmt.Sprintf("%s (%.0f B/s)", s.Label(), s.AllocBytesPerSecond)
		span.AddEvent(EventAllocSite, trace.WithAttributes(
			keyCodeFunction.String(s.Frame.Function),
			keyCodeFilepath.String(s.Frame.File),
			keyCodeLineno.Int(s.Frame.Line),
			keyAllocRate.Float64(s.AllocBytesPerSecond),
			keyAllocBytes.Int64(s.AllocBytes),
		))
	}
	span.SetAttributes(keyAllocSites.StringSlice(labels), keyAllocSitesWindow.Int64(sn.Window.Nanoseconds()))
}

// maxCauses bounds the causes a span names.
const maxCauses = 16

// WithCauses gives the wrapper the causes of GC work named now (pass the
// probe's GCCauseNames method): a reconcile that overlapped a GC cycle
// then carries them as its gcprobe.gc.causes attribute, e.g.
// ["allocation_driven"], so that a slow reconcile says why the GC it met
// worked hard. fn must not be nil; it is called once per such reconcile.
func WithCauses(fn func() []string) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("reconciletrace: WithCauses: nil function")
		}
		c.causes = fn
		return nil
	}
}

// addCauses names the causes of GC work on span when the reconcile
// overlapped a GC cycle and some are named.
func addCauses(span trace.Span, causes func() []string, start, end gcReading) {
	if causes == nil || end.cycles == start.cycles {
		return
	}
	if cs := causes(); len(cs) > 0 {
		span.SetAttributes(keyCauses.StringSlice(cs[:min(len(cs), maxCauses)]))
	}
}
