package pprofexporter

import (
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/google/pprof/profile"
)

// The profile's sample types, in the order of Sample.Value.
const (
	// SampleOutstanding counts registrations that have neither run nor
	// been cleared.
	SampleOutstanding = "outstanding"
	// SampleSuspect counts outstanding registrations that have survived at
	// least the watcher's SuspectCycles GC cycles.
	SampleSuspect = "suspect"
	// SampleRegistered counts every registration.
	SampleRegistered = "registered"
	// SampleGrowth is, at an entry that finalizerwatch's growth model
	// classes growing (a leak), the suspects it gained over the model's
	// window (SiteStats.Growth), and 0 at every other entry: stable caches
	// and churn weigh nothing. It is the default sample type, so that
	// go tool pprof -top lists the leaks, fastest first, and nothing else.
	SampleGrowth = "growth"
)

// LabelKind is the sample label that holds a registration's kind,
// "finalizer" or "cleanup".
const LabelKind = "kind"

// Profile returns the profile of ledger's outstanding finalizers and
// cleanups: one sample per ledger entry (Watcher.Stacks), located at its
// registration stack, with the values outstanding, suspect, registered and
// growth (all "count"; growth is the default) and a label LabelKind. A nil
// ledger means finalizerwatch.Default.
//
// The profile holds code locations and counts only (and the time it was
// built): function names, file names, line numbers and program counters of
// the registration stacks.
// Locations and functions are shared between samples. A frame without a
// program counter (the overflow entry's) gets a synthetic address, below
// any real one.
func Profile(ledger *finalizerwatch.Watcher) *profile.Profile {
	if ledger == nil {
		ledger = finalizerwatch.Default
	}
	// One read of every ledger entry, unsymbolized: the frames of each
	// program counter come from a cache shared by every profile.
	// The snapshot is pooled: its entries (10 000 of them take over a
	// megabyte) are read into the same slice by the next profile. The
	// profile keeps nothing of them.
	sn := snapshots.Get().(*finalizerwatch.Snapshot)
	defer snapshots.Put(sn)
	// Unranked: the profile uses the entries only, not the per-kind
	// ranking a Read would otherwise make if the GC cycle moved on.
	ledger.Read(sn, finalizerwatch.ReadOptions{Entries: true, Unranked: true})
	b := newBuilder()
	b.addEntries(sn.Entries)
	clear(sn.Entries) // drop the stacks' PCs until the next read
	return b.p
}

var snapshots = sync.Pool{New: func() any { return new(finalizerwatch.Snapshot) }}

// Write writes the profile of ledger (see Profile) to w in the gzipped
// protocol-buffer format that go tool pprof reads, as profile.Write does.
// A nil ledger means finalizerwatch.Default.
func Write(w io.Writer, ledger *finalizerwatch.Watcher) error {
	return writeGzipped(w, Profile(ledger), "profile")
}

// writeGzipped writes p to w gzipped; what names it in errors.
func writeGzipped(w io.Writer, p *profile.Profile, what string) error {
	// A gzip.Writer allocates about a megabyte of compressor state, more
	// than the profile of a thousand sites: reuse them.
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(w)
	if err := p.WriteUncompressed(zw); err != nil {
		return fmt.Errorf("pprofexporter: writing %s: %w", what, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("pprofexporter: writing %s: %w", what, err)
	}
	return nil
}

// gzipWriters compress at gzip.BestSpeed, as runtime/pprof does for its
// profiles: at the default level, compressing a profile of 10 000 stacks
// took longer than building it (about 20 ms more than BestSpeed), for a
// file about half the size (44 KB rather than 81 KB, from 490 KB).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return zw
}}

// builder assembles a profile, deduplicating functions and locations.
type builder struct {
	p     *profile.Profile
	funcs map[funcKey]*profile.Function
	// Locations by program counter (a hash of one word: the builder's hot
	// path), and by frame for the frames that share a PC or have none.
	byPC    map[uintptr]*profile.Location
	byFrame map[locKey]*profile.Location
	// byRet holds the locations of each return PC seen (one per frame of
	// its inlining chain), so that a PC shared by many stacks is
	// symbolized (through the process-wide cache, under its lock) once per
	// profile: a profile of 10 000 stacks holds some 300 000 PCs, but only
	// a few hundred distinct ones.
	byRet map[uintptr]retLocs
	// recent is a direct-mapped cache in front of byRet: the few hundred
	// distinct PCs of a profile mostly fit, and an array probe costs a
	// fraction of a map lookup, which at 300 000 PCs a profile shows.
	recent [256]struct {
		pc uintptr
		r  retLocs
	}
	// synth numbers the synthetic addresses of frames without a PC.
	synth  uint64
	frames []stackcapture.Frame // scratch for retLocations
	// Backing arrays that locations, their lines, functions and the
	// per-PC location lists are cut from: a profile of 10 000 distinct
	// sites has tens of thousands of each, and an allocation apiece made
	// building it mostly allocation and the GC work it brings.
	locArena  []profile.Location
	lineArena []profile.Line
	fnArena   []profile.Function
	ptrArena  []*profile.Location
}

// An arena's chunks start at minChunk values and double up to maxChunk,
// so that a small profile allocates little and a large one few times.
const (
	minChunk = 16
	maxChunk = 4096
)

// take returns the next n values of *arena, allocating a new chunk when
// it has fewer left (the values already taken stay where they are).
func take[T any](arena *[]T, n int) []T {
	if cap(*arena)-len(*arena) < n {
		*arena = make([]T, 0, max(n, min(2*cap(*arena), maxChunk), minChunk))
	}
	a := *arena
	*arena = a[: len(a)+n : cap(a)]
	return a[len(a) : len(a)+n : len(a)+n]
}

type funcKey struct{ name, file string }

// locKey identifies a location: its program counter and the frame it
// symbolizes to (frames without a PC are told apart by the latter alone).
type locKey struct {
	pc   uintptr
	fn   funcKey
	line int
}

func newBuilder() *builder {
	return &builder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: SampleOutstanding, Unit: "count"},
				{Type: SampleSuspect, Unit: "count"},
				{Type: SampleRegistered, Unit: "count"},
				{Type: SampleGrowth, Unit: "count"},
			},
			DefaultSampleType: SampleGrowth,
			TimeNanos:         time.Now().UnixNano(),
		},
		funcs:   make(map[funcKey]*profile.Function),
		byPC:    make(map[uintptr]*profile.Location),
		byFrame: make(map[locKey]*profile.Location),
		byRet:   make(map[uintptr]retLocs),
	}
}

// addFrames adds a sample of kind at the stack frames (innermost first),
// valued by values in the order of the profile's sample types: one
// location per frame, shared between samples. The profile's entries come
// through addEntries, which works from PCs; this is for stacks that are
// already symbolized (the sampled stacks' profile).
func (b *builder) addFrames(kind finalizerwatch.Kind, frames []stackcapture.Frame, values []int64) {
	locs := make([]*profile.Location, len(frames))
	for i := range frames {
		locs[i] = b.location(&frames[i])
	}
	b.p.Sample = append(b.p.Sample, &profile.Sample{
		Location: locs,
		Value:    values,
		Label:    map[string][]string{LabelKind: {kind.String()}},
	})
}

// addEntries adds the samples of entries, with a few allocations in all
// for their samples, values and locations rather than a few per sample.
func (b *builder) addEntries(entries []finalizerwatch.Entry) {
	n := 0
	for i := range entries {
		n += max(1, len(entries[i].PCs))
	}
	// Sized up front: the process-wide symbol cache holds every PC that
	// earlier profiles met, so its size bounds this one's distinct PCs
	// closely once a profile has been made, and growing the maps entry by
	// entry (rehashing as they go) cost a tenth of a profile of 10 000
	// sites.
	if hint := min(symbols.size(), n); len(b.byRet) == 0 && hint > 0 {
		b.byRet = make(map[uintptr]retLocs, hint)
		b.byPC = make(map[uintptr]*profile.Location, hint)
	}
	samples := make([]profile.Sample, len(entries))
	values := make([]int64, 4*len(entries))
	// The samples' location lists are cut from chunks: a stack takes at
	// least a location per PC, more where a PC expands to an inlining
	// chain, so the first chunk is sized by the PCs and a sample that does
	// not fit in what is left moves to a new chunk (rather than growing
	// one slice and copying every location before it).
	chunk := make([]*profile.Location, 0, n+n/8)
	// locate appends ls to the sample begun at chunk[start:].
	locate := func(start int, ls ...*profile.Location) int {
		if cap(chunk)-len(chunk) < len(ls) {
			c := make([]*profile.Location, 0, max(2*(len(chunk)-start+len(ls)), cap(chunk)/4))
			chunk = append(c, chunk[start:]...)
			start = 0
		}
		chunk = append(chunk, ls...)
		return start
	}
	var labels [len(finalizerwatch.Kinds)]map[string][]string
	for k, kind := range finalizerwatch.Kinds {
		labels[k] = map[string][]string{LabelKind: {kind.String()}}
	}
	b.p.Sample = make([]*profile.Sample, len(entries))
	for i := range entries {
		e := &entries[i]
		start := len(chunk)
		if e.PCs == nil {
			start = locate(start, b.location(&e.Site))
		}
		for j, pc := range e.PCs {
			var next uintptr
			if j+1 < len(e.PCs) {
				next = e.PCs[j+1]
			}
			start = locate(start, b.retLocations(pc, next)...)
		}
		var growth uint64
		if e.Class == finalizerwatch.ClassGrowing {
			growth = e.Growth
		}
		v := values[4*i : 4*i+4 : 4*i+4]
		v[0], v[1], v[2], v[3] = clampInt64(e.Outstanding), clampInt64(e.Suspect), clampInt64(e.Registered), clampInt64(growth)
		s := &samples[i]
		s.Location = chunk[start:len(chunk):len(chunk)]
		s.Value = v
		if int(e.Kind) < len(labels) {
			s.Label = labels[e.Kind]
		} else {
			s.Label = map[string][]string{LabelKind: {e.Kind.String()}}
		}
		b.p.Sample[i] = s
	}
}

// retLocs are the locations of a return PC's whole inlining chain,
// innermost first, and the PC that follows it where it stands for its
// innermost frame only (see calledFrom).
type retLocs struct {
	locs   []*profile.Location
	caller uintptr
}

// retLocations returns the locations of the return PC pc in a stack where
// next follows it (0 if none): those of its frames as symbols.frames gives
// them, symbolized once per profile.
func (b *builder) retLocations(pc, next uintptr) []*profile.Location {
	slot := &b.recent[(pc*0x9e3779b97f4a7c15)>>56]
	if slot.pc == pc && pc != 0 {
		if slot.r.caller == next {
			return slot.r.locs[:1]
		}
		return slot.r.locs
	}
	r, ok := b.byRet[pc]
	if !ok {
		b.frames = symbols.frames(pc, 0, b.frames[:0])
		fs := b.frames
		r = retLocs{locs: take(&b.ptrArena, len(fs)), caller: calledFrom(fs)}
		for j := range fs {
			r.locs[j] = b.location(&fs[j])
		}
		b.byRet[pc] = r
	}
	slot.pc, slot.r = pc, r
	if r.caller == next {
		return r.locs[:1]
	}
	return r.locs
}

// location returns the location of frame f.
func (b *builder) location(f *stackcapture.Frame) *profile.Location {
	// A PC from runtime.Callers symbolizes to one frame, always the same,
	// so the PC alone finds the location; the check guards against a PC
	// that stands for several frames (an inlining chain expanded from one
	// physical PC), which then fall back to the frame key.
	// The first location made for a PC is always byPC's, so a PC that
	// byPC has not seen has no location yet: only the frames that share
	// a PC with another, or have none, are keyed by frame (hashing two
	// strings, which at tens of thousands of sites a profile shows).
	var first bool
	if f.PC != 0 {
		l, seen := b.byPC[f.PC]
		if seen && sameFrame(l, f) {
			return l
		}
		first = !seen
	}
	key := locKey{pc: f.PC, fn: funcKey{f.Function, f.File}, line: f.Line}
	if !first {
		if l := b.byFrame[key]; l != nil {
			return l
		}
	}
	addr := uint64(f.PC)
	if addr == 0 {
		b.synth++
		addr = b.synth
	}
	l := &take(&b.locArena, 1)[0]
	line := take(&b.lineArena, 1)
	line[0] = profile.Line{Function: b.function(f), Line: int64(f.Line)}
	*l = profile.Location{
		ID:      uint64(len(b.p.Location) + 1),
		Address: addr,
		Line:    line,
	}
	b.p.Location = append(b.p.Location, l)
	if first {
		b.byPC[f.PC] = l
	} else {
		b.byFrame[key] = l
	}
	return l
}

// sameFrame reports whether l is the location of f.
func sameFrame(l *profile.Location, f *stackcapture.Frame) bool {
	ln := l.Line[0]
	return ln.Line == int64(f.Line) && ln.Function.Filename == f.File &&
		(ln.Function.Name == f.Function || f.Function == "" && ln.Function.Name == "unknown")
}

func (b *builder) function(f *stackcapture.Frame) *profile.Function {
	key := funcKey{f.Function, f.File}
	if fn := b.funcs[key]; fn != nil {
		return fn
	}
	name := f.Function
	if name == "" {
		name = "unknown"
	}
	fn := &take(&b.fnArena, 1)[0]
	*fn = profile.Function{
		ID:         uint64(len(b.p.Function) + 1),
		Name:       name,
		SystemName: name,
		Filename:   f.File,
	}
	b.p.Function = append(b.p.Function, fn)
	b.funcs[key] = fn
	return fn
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
