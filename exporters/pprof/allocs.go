package pprofexporter

import (
	"fmt"
	"io"
	"net/http"

	"github.com/google/pprof/profile"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/stackcapture"
)

// The allocation profile's sample types, in the order of Sample.Value.
const (
	// SampleAllocSpace is the bytes allocated at the site over the heap
	// profiler's latest window: the default sample type, so that go tool
	// pprof -top lists the sites that make the GC work, most first.
	SampleAllocSpace = "alloc_space"
	// SampleAllocObjects is the objects allocated over the window.
	SampleAllocObjects = "alloc_objects"
	// SampleInuseSpace is the bytes the site's allocations hold now.
	SampleInuseSpace = "inuse_space"
	// SampleGrowthSpace is how much the in-use bytes of a growing site grew
	// over its growing windows; 0 at the other sites.
	SampleGrowthSpace = "growth_space"
)

// AllocsProfile returns the heap profiler's snapshot as a profile: one
// sample per site of its top allocating and growing lists (a site on both
// once), located from the allocation's side: the site's path
// (heapprofile.Site.Path) innermost first, then the site and its callers.
// So go tool pprof -traces shows the way from the line down to the
// allocation, and -top lists the function that allocated as flat and the
// site as cum (a site whose own line allocated is both). The values are
// alloc_space (the default), alloc_objects, inuse_space and growth_space.
// It is a delta profile: the allocation values cover the snapshot's window
// only (Profile.DurationNanos), unlike the runtime's cumulative heap
// profile, so go tool pprof shows what allocates now rather than since the
// program started. Values are estimates scaled from the runtime's samples.
// A snapshot that names no line (the profile off, or overflowing) gives a
// profile without samples whose comments say why
// (heapprofile.Snapshot.StatusText).
func AllocsProfile(sn heapprofile.Snapshot) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: SampleAllocSpace, Unit: "bytes"},
			{Type: SampleAllocObjects, Unit: "count"},
			{Type: SampleInuseSpace, Unit: "bytes"},
			{Type: SampleGrowthSpace, Unit: "bytes"},
		},
		DefaultSampleType: SampleAllocSpace,
		TimeNanos:         sn.Time.UnixNano(),
		DurationNanos:     sn.Window.Nanoseconds(),
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            int64(sn.Rate),
		Comments: []string{fmt.Sprintf("gcprobe: the heap profile's top sites over a window of %v, runtime.MemProfileRate %d",
			sn.Window, sn.Rate)},
	}
	if msg := sn.StatusText(); msg != "" {
		// No sample, and the reason rather than an empty profile's silence.
		p.Comments = append(p.Comments, "gcprobe: "+msg)
	}
	funcs := map[string]*profile.Function{}
	locs := map[stackcapture.Frame]*profile.Location{}
	location := func(f stackcapture.Frame) *profile.Location {
		f.PC = 0 // locations by line: two PCs on one line are one place here
		if l := locs[f]; l != nil {
			return l
		}
		fn := funcs[f.Function]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
			funcs[f.Function] = fn
			p.Function = append(p.Function, fn)
		}
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
		locs[f] = l
		p.Location = append(p.Location, l)
		return l
	}
	seen := map[string]bool{}
	add := func(s *heapprofile.Site) {
		key := s.Frame.String()
		if seen[key] {
			return
		}
		seen[key] = true
		stack := s.Stack
		if len(stack) == 0 {
			stack = []stackcapture.Frame{s.Frame}
		}
		sample := &profile.Sample{Value: []int64{s.AllocBytes, s.AllocObjects, s.InUseBytes, 0}}
		if s.GrowingFor > 0 && s.GrownBytes > 0 {
			sample.Value[3] = s.GrownBytes
		}
		for i := len(s.Path) - 1; i >= 0; i-- { // the path is innermost last; a sample's leaf comes first
			sample.Location = append(sample.Location, location(s.Path[i]))
		}
		for _, f := range stack {
			sample.Location = append(sample.Location, location(f))
		}
		p.Sample = append(p.Sample, sample)
	}
	for i := range sn.Allocating {
		add(&sn.Allocating[i])
	}
	for i := range sn.Growing {
		add(&sn.Growing[i])
	}
	return p
}

// WriteAllocs writes AllocsProfile(sn) to w, gzipped, as go tool pprof
// reads it.
func WriteAllocs(w io.Writer, sn heapprofile.Snapshot) error {
	if err := AllocsProfile(sn).Write(w); err != nil {
		return fmt.Errorf("pprofexporter: writing the allocation profile: %w", err)
	}
	return nil
}

// AllocsHandler returns an http.Handler that serves AllocsProfile of the
// snapshot snap returns (a heapprofile.Profiler's Snapshot method) as a
// download named gcprobe-allocs.pb.gz, or as text with ?debug=1: mount it
// at /debug/pprof/gcprobe-allocs. It answers GET and HEAD (405 otherwise)
// and builds at most MaxConcurrentBuilds profiles at once (503 beyond).
// The profile holds at most the profiler's top K sites of each list, so a
// build is small. It refuses ?seconds (400): a delta needs the profiler
// itself, which AllocsProfilerHandler takes.
func AllocsHandler(snap func() heapprofile.Snapshot) http.Handler {
	return allocsHandler(snap)
}

func allocsHandler(snap func() heapprofile.Snapshot) *handler {
	return &handler{
		build:    func(w io.Writer) error { return WriteAllocs(w, snap()) },
		sem:      make(chan struct{}, MaxConcurrentBuilds),
		filename: "gcprobe-allocs.pb.gz",
	}
}

// AllocsProfilerHandler is AllocsHandler of p.Snapshot that also answers
// ?seconds=N, as continuous profilers ask for a delta, with the profile
// over the next N seconds: it marks the profiler's totals
// (heapprofile.Profiler.Mark), waits N seconds, and serves
// AllocsProfile(p.Since(mark)). alloc_space and alloc_objects are then
// what each site allocated over that time, the top sites by it; the
// in-use and growth figures, gauges, are those of the end. The profile's
// TimeNanos is the request's start and DurationNanos N seconds. The
// runtime publishes its heap profile at the end of each GC cycle and the
// profiler reads it every heapprofile.WithInterval, so the figures are
// those of the reads made in the N seconds (each covering the time since
// the read before it): ask for N of a few intervals. See Handler for the
// limits on N, on concurrent deltas, and for cancellation.
func AllocsProfilerHandler(p *heapprofile.Profiler) http.Handler {
	h := allocsHandler(p.Snapshot)
	h.delta = func(bool) (func() (*profile.Profile, error), error) {
		m := p.Mark()
		return func() (*profile.Profile, error) { return AllocsProfile(p.Since(m)), nil }, nil
	}
	h.deltas = make(chan struct{}, MaxConcurrentDeltas)
	return h
}
