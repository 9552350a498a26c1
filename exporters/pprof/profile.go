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

// Sample types the profile always has. The whole list, in the order of
// Sample.Value, is the summary counters of finalizerwatch.Counters
// (registered, executed and outstanding), then suspect, growth, dropped
// and leaked (the default).
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
	// and churn weigh nothing.
	SampleGrowth = "growth"
	// SampleDropped counts, of an entry's executed finalizers and
	// cleanups, those of files, network connections, os.Root and
	// os.Process dropped without Close (finalizerwatch Counts.Dropped):
	// each one a descriptor or handle the program left to the garbage
	// collector. Runtime build mode only; 0 in any other build.
	SampleDropped = "dropped"
	// SampleLeaked is what a line has leaked so far, in objects: at an
	// entry classed growing, its suspects (the long-lived registrations
	// it keeps piling up), plus, at any entry, what it dropped without
	// Close. It is the default sample type, so that go tool pprof -top
	// lists the leaks of either kind, largest first, and nothing else:
	// stable caches and churn weigh nothing, and a line that drops files
	// (churn to the growth model, as their finalizers run) is not left
	// out. Both terms count objects since the program started, so that
	// neither drowns the other by its time base (growth, over the model's
	// window, would: see the package documentation).
	SampleLeaked = "leaked"
)

// LabelKind is the sample label that holds a registration's kind,
// "finalizer" or "cleanup".
const LabelKind = "kind"

// Profile returns the profile of ledger's outstanding finalizers and
// cleanups: one sample per ledger entry (Snapshot.Entries), located at its
// registration stack, with the values registered, executed, outstanding,
// suspect, growth, dropped and leaked (all "count"; leaked is the default;
// see the package documentation) and a label LabelKind. A nil ledger means
// finalizerwatch.Default.
//
// The profile holds code locations and counts only (and the time it was
// built): function names, file names, line numbers and program counters of
// the registration stacks.
// Locations and functions are shared between samples. A frame without a
// program counter (the overflow entry's) gets a synthetic address, below
// any real one.
//
// Samples with the same labels (every sample of a kind) share one Label
// map, and its value list: a caller that changes one sample's labels gives
// it a map of its own first. The profile package's own label methods
// (SetLabel, RemoveLabel) change every sample alike, and Merge copies.
//
// It is what Write encodes, decoded: a caller that only writes the
// profile out should call Write, which skips the decoding. Should the
// decoding fail (a bug in this package), the profile has no samples and a
// comment that says why.
func Profile(ledger *finalizerwatch.Watcher) *profile.Profile {
	b := ledgerBuilder(ledger)
	defer b.release()
	return b.decode()
}

// ledgerBuilder returns a builder holding the profile of ledger (nil for
// finalizerwatch.Default).
func ledgerBuilder(ledger *finalizerwatch.Watcher) *builder {
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
	b := entriesBuilder(sn.Entries)
	clear(sn.Entries) // drop the stacks' PCs until the next read
	return b
}

// entriesBuilder returns a builder holding the profile of entries: the
// ledger's sample types, leaked the default.
func entriesBuilder(entries []finalizerwatch.Entry) *builder {
	b := newBuilder(ledgerTypes, SampleLeaked)
	b.addEntries(entries)
	return b
}

// ledgerSamples are Profile's sample types, in the order of Sample.Value,
// and the value of each at a ledger entry: the one list of them, which
// ledgerTypes and addEntries read. They are
// finalizerwatch.SummaryCounters (registered, executed and outstanding today),
// named as it names them, in its order, then suspect, growth, dropped and
// leaked: a per-site counter added to finalizerwatch.Counts as a summary
// counter is a sample type of the profile as it is added there. The new
// types go last, so that a numeric -sample_index keeps its meaning.
var ledgerSamples = func() []ledgerSample {
	var ls []ledgerSample
	dropped := true // unless a summary counter already
	for _, c := range finalizerwatch.SummaryCounters() {
		ls = append(ls, ledgerSample{c.Name, func(e *finalizerwatch.Entry) uint64 { return c.Value(&e.Counts) }})
		dropped = dropped && c.Name != SampleDropped
	}
	ls = append(ls,
		ledgerSample{SampleSuspect, func(e *finalizerwatch.Entry) uint64 { return e.Suspect }},
		ledgerSample{SampleGrowth, entryGrowth})
	if dropped {
		ls = append(ls, ledgerSample{SampleDropped, func(e *finalizerwatch.Entry) uint64 { return e.Dropped }})
	}
	return append(ls, ledgerSample{SampleLeaked, entryLeaked})
}()

// ledgerSample is a row of ledgerSamples: a sample type and its value at
// an entry.
type ledgerSample struct {
	typ   string
	value func(*finalizerwatch.Entry) uint64
}

// maxLedgerSamples bounds len(ledgerSamples).
const maxLedgerSamples = finalizerwatch.NumCounters + 4

// entryGrowth is SampleGrowth's value: the growth of an entry classed
// growing, 0 at any other.
func entryGrowth(e *finalizerwatch.Entry) uint64 {
	if e.Class == finalizerwatch.ClassGrowing {
		return e.Growth
	}
	return 0
}

// entryLeaked is SampleLeaked's value: the suspects of an entry classed
// growing, plus its drops, saturating.
func entryLeaked(e *finalizerwatch.Entry) uint64 {
	var held uint64
	if e.Class == finalizerwatch.ClassGrowing {
		held = e.Suspect
	}
	if l := held + e.Dropped; l >= held {
		return l
	}
	return 1<<64 - 1
}

// ledgerTypes are Profile's sample types, those of ledgerSamples: made
// once, as every profile shares them.
var ledgerTypes = func() []string {
	types := make([]string, len(ledgerSamples))
	for i, s := range ledgerSamples {
		types[i] = s.typ
	}
	return types
}()

var snapshots = sync.Pool{New: func() any { return new(finalizerwatch.Snapshot) }}

// Write writes the profile of ledger (see Profile) to w in the gzipped
// protocol-buffer format that go tool pprof reads, as profile.Write does.
// A nil ledger means finalizerwatch.Default.
func Write(w io.Writer, ledger *finalizerwatch.Watcher) error {
	b := ledgerBuilder(ledger)
	defer b.release()
	return b.writeGzipped(w, "profile")
}

// writeGzipped writes the profile to w gzipped; what names it in errors.
func (b *builder) writeGzipped(w io.Writer, what string) error {
	// A gzip.Writer allocates about a megabyte of compressor state, more
	// than the profile of a thousand sites: reuse them.
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(w)
	if _, err := zw.Write(b.encode()); err != nil {
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

// builder encodes a profile (see encode.go), deduplicating functions,
// locations and strings. Locations and functions are numbered from 1 in
// the order they are first met, and encoded then; samples are encoded as
// they are added. Builders are pooled: their maps and buffers, sized by
// the largest profile made lately, are reused by the next.
type builder struct {
	// Encoded messages: the samples, locations, functions and string
	// table entries, each a run of Profile fields.
	samples, locs, funcs, strs []byte
	// Header fields.
	sampleTypes []string
	defaultType string
	comments    []string

	strIdx map[string]int64 // string table index of each string
	funcID map[funcKey]uint64
	// fns and lines describe function i+1 and location i+1, so that
	// sameFrame can check a location found by PC.
	fns   []funcKey
	lines []locLine
	// Locations by program counter (a hash of one word: the builder's hot
	// path), and by frame for the frames that share a PC or have none.
	byPC    map[uintptr]uint64
	byFrame map[locKey]uint64
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
	// ids is the backing that byRet's location lists are cut from.
	ids []uint64
	// Scratch for one sample's location IDs, one message, a location's
	// line, and the label message of each kind.
	stack  []uint64
	msg    []byte
	line   []byte
	labels [len(finalizerwatch.Kinds)][]byte
	out    []byte // the whole profile, as encode returns it
}

// locLine is a location's line: its function's ID and its line number.
type locLine struct {
	fn   uint64
	line int64
}

type funcKey struct{ name, file string }

// locKey identifies a location: its program counter and the frame it
// symbolizes to (frames without a PC are told apart by the latter alone).
type locKey struct {
	pc   uintptr
	fn   funcKey
	line int
}

var builders = sync.Pool{New: func() any {
	return &builder{
		strIdx:  make(map[string]int64),
		funcID:  make(map[funcKey]uint64),
		byPC:    make(map[uintptr]uint64),
		byFrame: make(map[locKey]uint64),
		byRet:   make(map[uintptr]retLocs),
	}
}}

// maxPooledBytes bounds the encoded profile a pooled builder keeps the
// buffers of: a builder that made a larger one is dropped after use.
const maxPooledBytes = 4 << 20

// newBuilder returns an empty builder of a profile with the sample types
// types (unit "count"), defaultType the default.
func newBuilder(types []string, defaultType string) *builder {
	b := builders.Get().(*builder)
	b.sampleTypes, b.defaultType = types, defaultType
	b.str("")
	for k, kind := range finalizerwatch.Kinds {
		b.labels[k] = b.appendLabel(b.labels[k][:0], kind)
	}
	return b
}

// appendLabel appends the Label message of a sample of kind.
func (b *builder) appendLabel(dst []byte, kind finalizerwatch.Kind) []byte {
	dst = appendInt(dst, fLabelKey, b.str(LabelKind))
	return appendInt(dst, fLabelStr, b.str(kind.String()))
}

// release returns b to the pool, emptied, unless it grew too large to
// keep. Nothing of b may be used after.
func (b *builder) release() {
	if len(b.out) > maxPooledBytes || len(b.samples) > maxPooledBytes {
		return
	}
	b.samples, b.locs, b.funcs, b.strs, b.out = b.samples[:0], b.locs[:0], b.funcs[:0], b.strs[:0], b.out[:0]
	b.sampleTypes, b.defaultType, b.comments = nil, "", nil
	clear(b.strIdx)
	clear(b.funcID)
	clear(b.byPC)
	clear(b.byFrame)
	clear(b.byRet)
	b.recent = [len(b.recent)]struct {
		pc uintptr
		r  retLocs
	}{}
	b.fns, b.lines, b.ids = b.fns[:0], b.lines[:0], b.ids[:0]
	clear(b.frames[:cap(b.frames)]) // copies of the frame cache's strings
	b.frames = b.frames[:0]
	b.synth = 0
	builders.Put(b)
}

// str returns s's index in the string table, adding it if new.
func (b *builder) str(s string) int64 {
	if i, ok := b.strIdx[s]; ok {
		return i
	}
	i := int64(len(b.strIdx))
	b.strIdx[s] = i
	b.strs = appendBytes(b.strs, fProfileStringTable, s)
	return i
}

// encode returns the profile, uncompressed. The bytes are b's: valid
// until b is released.
func (b *builder) encode() []byte {
	out := b.out[:0]
	for _, t := range b.sampleTypes {
		m := appendInt(b.msg[:0], fValueTypeType, b.str(t))
		b.msg = appendInt(m, fValueTypeUnit, b.str("count"))
		out = appendBytes(out, fProfileSampleType, b.msg)
	}
	out = append(out, b.samples...)
	out = append(out, b.locs...)
	out = append(out, b.funcs...)
	out = appendInt(out, fProfileTimeNanos, time.Now().UnixNano())
	for _, c := range b.comments {
		out = appendInt(out, fProfileComment, b.str(c))
	}
	out = appendInt(out, fProfileDefaultSampleType, b.str(b.defaultType))
	// Last, as every string is in the table by now.
	out = append(out, b.strs...)
	b.out = out
	return out
}

// decode returns the profile as a profile.Profile.
func (b *builder) decode() *profile.Profile {
	p, err := decodeProfile(b.encode())
	if err != nil {
		// The encoding is this package's; a profile it cannot read back
		// is a bug here, reported where the profile is read rather than
		// as a panic in the caller.
		st := make([]*profile.ValueType, len(b.sampleTypes))
		for i, t := range b.sampleTypes {
			st[i] = &profile.ValueType{Type: t, Unit: "count"}
		}
		return &profile.Profile{SampleType: st, DefaultSampleType: b.defaultType,
			Comments: []string{"pprofexporter: internal error, no samples: " + err.Error()}}
	}
	return p
}

// addSample encodes a sample of kind at the locations of b.stack, valued
// by values.
func (b *builder) addSample(kind finalizerwatch.Kind, values []int64) {
	m := appendPacked(b.msg[:0], fSampleLocationID, b.stack)
	m = appendPacked(m, fSampleValue, values)
	if int(kind) < len(b.labels) {
		m = appendBytes(m, fSampleLabel, b.labels[kind])
	} else {
		m = appendBytes(m, fSampleLabel, b.appendLabel(nil, kind))
	}
	b.msg = m
	b.samples = appendBytes(b.samples, fProfileSample, m)
}

// addFrames adds a sample of kind at the stack frames (innermost first),
// valued by values in the order of the profile's sample types: one
// location per frame, shared between samples. The profile's entries come
// through addEntries, which works from PCs; this is for stacks that are
// already symbolized (the sampled stacks' profile).
func (b *builder) addFrames(kind finalizerwatch.Kind, frames []stackcapture.Frame, values []int64) {
	b.stack = b.stack[:0]
	for i := range frames {
		b.stack = append(b.stack, b.location(&frames[i]))
	}
	b.addSample(kind, values)
}

// addEntries adds the samples of entries.
func (b *builder) addEntries(entries []finalizerwatch.Entry) {
	var buf [maxLedgerSamples]int64
	values := buf[:len(ledgerSamples)]
	for i := range entries {
		e := &entries[i]
		// The stack is built in a local and stored in b once per entry:
		// a slice stored in b (on the heap) takes a write barrier while
		// the GC marks, and this runs for every PC (some 300 000 in a
		// profile of 10 000 sites).
		stack := b.stack[:0]
		if e.PCs == nil {
			stack = append(stack, b.location(&e.Site))
		}
		for j, pc := range e.PCs {
			var next uintptr
			if j+1 < len(e.PCs) {
				next = e.PCs[j+1]
			}
			stack = append(stack, b.retLocations(pc, next)...)
		}
		b.stack = stack
		for j := range ledgerSamples {
			values[j] = clampInt64(ledgerSamples[j].value(e))
		}
		b.addSample(e.Kind, values)
	}
}

// retLocs are the locations of a return PC's whole inlining chain,
// innermost first, and the PC that follows it where it stands for its
// innermost frame only (see calledFrom).
type retLocs struct {
	locs   []uint64
	caller uintptr
}

// retLocations returns the locations of the return PC pc in a stack where
// next follows it (0 if none): those of its frames as retFrames gives
// them, symbolized once per profile.
func (b *builder) retLocations(pc, next uintptr) []uint64 {
	slot := &b.recent[(pc*0x9e3779b97f4a7c15)>>56]
	if slot.pc == pc && pc != 0 {
		return slot.r.forNext(next)
	}
	r, ok := b.byRet[pc]
	if !ok {
		b.frames = retFrames(pc, 0, b.frames[:0])
		fs := b.frames
		start := len(b.ids)
		for j := range fs {
			b.ids = append(b.ids, b.location(&fs[j]))
		}
		// Cut with its capacity: a later append to ids that moves it
		// leaves the lists already cut where they are.
		r = retLocs{locs: b.ids[start:len(b.ids):len(b.ids)], caller: calledFrom(fs)}
		b.byRet[pc] = r
	}
	slot.pc, slot.r = pc, r
	return r.forNext(next)
}

// forNext returns the locations of r's PC in a stack where next follows
// it: only the innermost where next is the virtual PC of its caller
// (none, if the PC symbolized to no frame at all).
func (r *retLocs) forNext(next uintptr) []uint64 {
	if r.caller == next && len(r.locs) > 0 {
		return r.locs[:1]
	}
	return r.locs
}

// location returns the ID of frame f's location, encoding it if new.
func (b *builder) location(f *stackcapture.Frame) uint64 {
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
		id, seen := b.byPC[f.PC]
		if seen && b.sameFrame(id, f) {
			return id
		}
		first = !seen
	}
	key := locKey{pc: f.PC, fn: funcKey{f.Function, f.File}, line: f.Line}
	if !first {
		if id := b.byFrame[key]; id != 0 {
			return id
		}
	}
	addr := uint64(f.PC)
	if addr == 0 {
		b.synth++
		addr = b.synth
	}
	fn := b.function(f)
	id := uint64(len(b.lines) + 1)
	b.lines = append(b.lines, locLine{fn: fn, line: int64(f.Line)})
	b.line = appendInt(appendUint(b.line[:0], fLineFunctionID, fn), fLineLine, int64(f.Line))
	m := appendUint(b.msg[:0], fLocationID, id)
	m = appendUint(m, fLocationAddress, addr)
	b.msg = appendBytes(m, fLocationLine, b.line)
	b.locs = appendBytes(b.locs, fProfileLocation, b.msg)
	if first {
		b.byPC[f.PC] = id
	} else {
		b.byFrame[key] = id
	}
	return id
}

// sameFrame reports whether location id is that of f.
func (b *builder) sameFrame(id uint64, f *stackcapture.Frame) bool {
	ln := b.lines[id-1]
	fn := b.fns[ln.fn-1]
	return ln.line == int64(f.Line) && fn.file == f.File &&
		(fn.name == f.Function || f.Function == "" && fn.name == "unknown")
}

// function returns the ID of frame f's function, encoding it if new.
func (b *builder) function(f *stackcapture.Frame) uint64 {
	key := funcKey{f.Function, f.File}
	if id := b.funcID[key]; id != 0 {
		return id
	}
	name := f.Function
	if name == "" {
		name = "unknown"
	}
	id := uint64(len(b.fns) + 1)
	b.fns = append(b.fns, funcKey{name, f.File})
	b.funcID[key] = id
	nameIdx := b.str(name)
	m := appendUint(b.msg[:0], fFunctionID, id)
	m = appendInt(m, fFunctionName, nameIdx)
	m = appendInt(m, fFunctionSystemName, nameIdx)
	m = appendInt(m, fFunctionFilename, b.str(f.File))
	b.msg = m
	b.funcs = appendBytes(b.funcs, fProfileFunction, m)
	return id
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
