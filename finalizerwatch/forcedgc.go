package finalizerwatch

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/gcprobe/probe/internal/bounded"
	"github.com/gcprobe/probe/stackcapture"
)

// Forced GC cycles: which line calls runtime.GC or debug.FreeOSMemory.
//
// The forced-cycle rate (/gc/cycles/forced:gc-cycles, memstats' forced_gc
// detector) says that something forces cycles, not what. In the runtime
// build mode the patched runtime.GC calls rtForcedGC first, on the calling
// goroutine, before any of the cycle's work, with its caller's return PC
// (mgc.go's join point, cmd/finalizercheck/rtpatch.go). Every forced cycle
// is started there: debug.FreeOSMemory reaches GC through
// runtime/debug.freeOSMemory (mheap.go's runtime_debug_freeOSMemory, which
// calls GC and then returns memory to the system), and runtime/pprof's
// goroutine leak profile through goroutineLeakGC; for those the PC is in
// the runtime and the hook walks up the stack.
//
// A call is counted at its site, the rule registrations follow: the first
// frame outside the runtime, the standard library and gcprobe (so
// FreeOSMemory's caller, not runtime/debug; a test's line, not
// finalizertest's loop that it called), or, on a goroutine with no such
// frame (one that net/http/pprof's handler runs on), the line that caused
// the goroutine (rtorigin.go). A call with neither is counted under one
// entry that says so (forcedNoLine).
//
// The table is the process's, as the runtime's hooks are: only one Watcher
// is ever attached (AttachRuntime). It counts while one is attached, and
// its counts stay when it is detached: a probe started again reads calls
// since the first attachment. It is bounded (MaxForcedGCSites lines, the
// rest under one overflow entry), and a line's calls after its first are
// counted without allocating, locking or symbolizing: a direct call of
// runtime.GC at a line seen before is one load of a direct-mapped cache
// and one atomic add; a call through FreeOSMemory adds a frame-pointer walk
// of a few frames and cached lookups. Only a line's first call symbolizes
// its PC and inserts it, under the table's lock (never held across
// anything that waits). The hook recovers from any panic: a call it failed
// on is not counted, and runtime.GC goes on.
//
// The hook adds nothing to anything but runtime.GC: no other function of
// the runtime calls it, and with no probe attached runtime.GC pays a
// pointer load and a nil check (a GC cycle itself takes milliseconds).

// ForcedGCSite is a line that called runtime.GC or debug.FreeOSMemory, in the runtime mode.
type ForcedGCSite struct {
	Site  stackcapture.Frame // the calling line
	Calls uint64             // calls since the probe started counting
}

// MaxForcedGCSites bounds the lines ForcedGCSites tells apart: calls from
// lines past it are counted under one overflow entry, whose Site is the
// ledger's overflow site (Function "gcprobe.overflow").
const MaxForcedGCSites = 64

// ForcedGCSites appends the lines that forced GC cycles, most calls
// first, and returns the slice; always empty outside the runtime mode
// (RuntimeModeForcedGC reports whether the mode is counting).
//
// The counts are calls of runtime.GC (debug.FreeOSMemory calls it once),
// counted while a Watcher is attached to the runtime (AttachRuntime: the
// probe attaches its own when the binary was built in the runtime build
// mode), since the first attachment in the process; RuntimeModeForcedGC
// reports whether they are being counted now. Calls from lines past
// MaxForcedGCSites are summed in an entry whose Site.Function is
// "gcprobe.overflow"; calls on a goroutine with no line of the program's
// on its stack nor a go statement that caused it, in one whose
// Site.Function is "runtime.GC" and whose Site.File says so. Concurrent
// calls of runtime.GC may share one cycle, so that the calls can exceed
// the forced cycles of /gc/cycles/forced:gc-cycles.
func ForcedGCSites(dst []ForcedGCSite) []ForcedGCSite {
	m := forcedTable.Load()
	if m == nil || !RuntimeMode() {
		return dst
	}
	start := len(dst)
	add := func(f *stackcapture.Frame, calls uint64) {
		if calls == 0 {
			return
		}
		// One entry per line: a line keyed by two PCs (two calls on one
		// line, or a stack walked by runtime.Callers after the
		// frame-pointer walk was turned off) is summed.
		for i := start; i < len(dst); i++ {
			if s := &dst[i].Site; s.Function == f.Function && s.File == f.File && s.Line == f.Line {
				dst[i].Calls += calls
				return
			}
		}
		dst = append(dst, ForcedGCSite{Site: *f, Calls: calls})
	}
	m.Range(func(_ uintptr, s *forcedSite) bool {
		add(s.frame, s.calls.Load())
		return true
	})
	add(&overflowFrame, forcedOverflow.calls.Load())
	add(&forcedNoLineFrame, forcedNoLine.calls.Load())
	slices.SortStableFunc(dst[start:], func(a, b ForcedGCSite) int {
		if c := cmp.Compare(b.Calls, a.Calls); c != 0 {
			return c
		}
		return cmp.Compare(a.Site.String(), b.Site.String())
	})
	return dst
}

// RuntimeModeForcedGC reports whether calls of runtime.GC and
// debug.FreeOSMemory are being counted now, by line (ForcedGCSites): the
// binary was built in the runtime build mode and a Watcher is attached to
// the runtime (AttachRuntime).
func RuntimeModeForcedGC() bool { return RuntimeMode() && forcedOn.Load() }

// forcedSite is a line's entry: its key, the return PC of its frame, and
// its frame, symbolized when the entry was made (a pointer into the
// process's frame cache, stackcapture.SiteFrameOfPC).
type forcedSite struct {
	pc    uintptr
	frame *stackcapture.Frame
	calls atomic.Uint64
}

var (
	// forcedTable holds the lines, made by the first AttachRuntime.
	forcedTable atomic.Pointer[bounded.Map[uintptr, forcedSite]]
	// forcedOn is set while a Watcher is attached.
	forcedOn atomic.Bool
	// forcedOverflow counts the calls of lines the table had no room
	// for; forcedNoLine those of no line of the program's.
	forcedOverflow, forcedNoLine forcedSite
	// forcedPCs caches the entries of return PCs that are a line of the
	// program's themselves (a direct runtime.GC call), direct-mapped
	// (rtPCSlot) as the registrations' rtPCs: two PCs that map to one
	// slot take turns in it.
	forcedPCs [1 << rtPCBits]atomic.Pointer[forcedSite]
)

// forcedNoLineFrame is the site of calls on a goroutine that no line of
// the program's caused: never a frame of the toolchain's source.
var forcedNoLineFrame = stackcapture.Frame{Function: "runtime.GC",
	File: "(on a goroutine the standard library or the runtime started; no line of the program's caused it)"}

// forcedInit makes the table, once. Under rtMu, before the hooks are on.
func forcedInit() {
	if forcedTable.Load() == nil {
		forcedTable.Store(bounded.New[uintptr, forcedSite](MaxForcedGCSites))
	}
}

// rtForcedGC is runtime.GC's hook: pc is the return PC into GC's caller.
func rtForcedGC(pc uintptr) {
	if s := forcedPCs[rtPCSlot(pc)].Load(); s != nil && s.pc == pc {
		s.calls.Add(1)
		return
	}
	rtForcedGCSlow(pc)
}

// rtForcedGCSlow counts a call of runtime.GC whose caller's PC is not in
// the cache: a line's first call, a call through the standard library or
// the runtime (FreeOSMemory), or a line pushed out of its slot.
//
//go:noinline
func rtForcedGCSlow(pc uintptr) {
	defer func() {
		// The hook runs inside runtime.GC: nothing may escape from it.
		_ = recover()
	}()
	m := forcedTable.Load()
	if m == nil {
		return
	}
	if stackcapture.OriginOf(pc) == stackcapture.OriginUser {
		s := forcedSiteAt(m, pc)
		if s != &forcedOverflow {
			forcedPCs[rtPCSlot(pc)].Store(s)
		}
		s.calls.Add(1)
		return
	}
	forcedSiteAbove(m, pc).calls.Add(1)
}

// forcedSiteAbove returns the entry of a call of runtime.GC whose caller,
// at return PC pc, is the runtime's, the standard library's or gcprobe's:
// the first frame of the program's above it on this goroutine's stack
// (rtShortWalk frames first, as rtIndirectSite does), else the line that
// caused the goroutine, else forcedNoLine. A frame of gcprobe's is
// passed over, as the standard library's: a test that calls a
// finalizertest helper that forces cycles is the line.
func forcedSiteAbove(m *bounded.Map[uintptr, forcedSite], pc uintptr) *forcedSite {
	var pcs [stackcapture.MaxDepth]uintptr
	for _, depth := range [...]int{rtShortWalk, len(pcs)} {
		n := stackcapture.Callers(0, pcs[:depth])
		for _, p := range fromPC(pcs[:n], pc) {
			if stackcapture.OriginOf(p) == stackcapture.OriginUser {
				return forcedSiteAt(m, p)
			}
		}
	}
	if opc, _ := goroutineOrigin(); opc != 0 && stackcapture.OriginOf(opc) == stackcapture.OriginUser {
		return forcedSiteAt(m, opc)
	}
	return &forcedNoLine
}

// forcedSiteAt returns the entry of the line at return PC pc, adding it,
// or the overflow entry when the table is full.
func forcedSiteAt(m *bounded.Map[uintptr, forcedSite], pc uintptr) *forcedSite {
	h := stackcapture.HashPC(pc)
	if s := m.Get(h, pc); s != nil {
		return s
	}
	if m.Len() >= m.Limit() {
		return &forcedOverflow
	}
	// The line's first call: symbolized outside the table's lock.
	f := stackcapture.SiteFrameOfPC(pc)
	if f == nil {
		sf := stackcapture.SiteOfPC(pc)
		f = &sf
	}
	if s := m.LoadOrInit(h, pc, func(s *forcedSite) { s.pc, s.frame = pc, f }); s != nil {
		return s
	}
	return &forcedOverflow
}
