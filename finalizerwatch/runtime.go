package finalizerwatch

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/stackcapture"
)

// The runtime build mode: the ledger's side.
//
// Built with the flag finalizercheck -runtime prints, the Go runtime calls
// the hooks below from runtime.SetFinalizer, runtime.AddCleanup,
// runtime.Cleanup.Stop and the goroutines that run finalizers and
// cleanups (the patch's runtime side is cmd/finalizercheck/rtpatch). Every
// registration in the binary then reaches the ledger attached with
// AttachRuntime, whoever made it: the user's code, a dependency, the
// standard library (os.File, net connections, os.Process), reflection.
// runtime.GC reports its caller too, to the count of forced GC cycles by
// line (forcedgc.go), and go statements their goroutine's origin
// (rtorigin.go).
//
// A registration is counted at the first frame above the runtime function
// that is neither the runtime's, the standard library's, reflection's nor
// a compiler wrapper's (stackcapture.OriginOf): the user's os.Open line,
// or the dependency's own runtime.SetFinalizer line. Where that frame is
// gcprobe's library code (finalizerwatch's own registrations, the GC-cycle
// clock's sentinels, the drop-in's checks), the hook counts nothing: the
// drop-in counts its registrations itself, once. Where the runtime mode's
// site was reached through the standard library, the entry also knows the
// registered object's type (Resource), and whether a run of its finalizer
// means the object was dropped without Close (Dropped).
//
// The hook returns a token, which the runtime keeps with the registration
// (a finalizer's in the high bits of its special record's nret word, a
// cleanup's in its argument box and its special record): the entry's id
// (the running-callback registry's, runID) and the registration's GC
// cycle. A clear, a Stop and a run give it back, so that no address table
// is needed: a set+clear costs a frame-pointer step, a site lookup and the
// counts.
//
// tokCycleBits of cycle are kept: the age of a registration outstanding
// for more than 2^25 GC cycles (a year at one cycle a second) is taken
// modulo that when it is cleared or run, which can move it from the oldest
// age bucket to a younger one; the totals stay exact.

// rtHookTable is laid out as the runtime's gcprobeHookTable
// (cmd/finalizercheck/rtpatch/gcprobe_hooks.go.tmpl; TestHookTableLayout
// compares them).
type rtHookTable struct {
	version        uintptr
	finalizerSet   func(typ unsafe.Pointer, pc uintptr) uint64
	finalizerClear func(tok uint64)
	finalizerStart func(tok uint64) uint64
	finalizerDone  func(tok, state uint64)
	cleanupAdd     func(typ unsafe.Pointer, pc uintptr) uint64
	cleanupStop    func(tok uint64)
	cleanupStart   func(tok uint64) uint64
	cleanupDone    func(tok, state uint64)
	goOrigin       func(pc, parent uintptr) uintptr
	forcedGC       func(pc uintptr)
	countReg       func(kind uintptr, tok uint64)
	onP            uintptr
}

const rtHookVersion = 5

const (
	tokCycleBits = 25
	tokCycleMask = 1<<tokCycleBits - 1
)

var rtTable = rtHookTable{
	version:        rtHookVersion,
	finalizerSet:   rtFinalizerSet,
	finalizerClear: rtFinalizerClear,
	finalizerStart: rtFinalizerStart,
	finalizerDone:  rtFinalizerDone,
	cleanupAdd:     rtCleanupAdd,
	cleanupStop:    rtCleanupStop,
	cleanupStart:   rtCleanupStart,
	cleanupDone:    rtCleanupDone,
	goOrigin:       rtGoOrigin,
	forcedGC:       rtForcedGC,
	countReg:       rtCountReg,
	onP:            1,
}

// rtDetached is the table the runtime reads once the last attachment is
// detached: registrations are not counted (their hooks return 0 at once),
// while the clears, Stops and runs of those counted before still are, so
// that the ledger stays exact across any sequence of attach and detach (a
// probe's Start, Stop and Start). Were the hooks set to nil instead, a
// registration counted while attached and run, cleared or stopped while
// detached would stay outstanding in the ledger forever. Go statements
// still record their goroutines' origins (rtorigin.go), so that a
// goroutine started while detached (a server's accept loop) is counted
// at its line once attached again. Calls of runtime.GC are not counted
// (forcedgc.go).
var rtDetached = rtHookTable{
	version:        rtHookVersion,
	finalizerSet:   func(unsafe.Pointer, uintptr) uint64 { return 0 },
	finalizerClear: rtFinalizerClear,
	finalizerStart: rtFinalizerStart,
	finalizerDone:  rtFinalizerDone,
	cleanupAdd:     func(unsafe.Pointer, uintptr) uint64 { return 0 },
	cleanupStop:    rtCleanupStop,
	cleanupStart:   rtCleanupStart,
	cleanupDone:    rtCleanupDone,
	goOrigin:       rtGoOrigin,
	forcedGC:       func(uintptr) {},
	countReg:       rtCountReg,
	onP:            1,
}

var (
	rtMu      sync.Mutex
	rtAttachN int                     // attachments not yet detached, under rtMu
	rtW       atomic.Pointer[Watcher] // the one watcher the runtime's tokens belong to
)

// ErrNoRuntimeMode is AttachRuntime's error in a binary not built in the
// runtime build mode.
var ErrNoRuntimeMode = errors.New("finalizerwatch: this binary was not built in the runtime build mode (add the flag that finalizercheck -runtime prints to go build)")

// RuntimeMode reports whether the binary was built in the runtime build
// mode, in which AttachRuntime makes the runtime report every
// registration in the binary to a ledger: with the gcprobe_runtime tag
// and a runtime that finalizercheck -runtime patched with hooks of this
// gcprobe's version. (A build with the tag and an unpatched runtime does
// not link: rtlink_on.go. One whose runtime was patched by a gcprobe of
// another version links, and RuntimeMode is false: AttachRuntime's error
// says why.)
func RuntimeMode() bool { return rtLinked() && rtVersion() == rtHookVersion }

// AttachRuntime makes the Go runtime report every SetFinalizer,
// AddCleanup, Cleanup.Stop and every finalizer and cleanup run in the
// binary to w's ledger, and every call of runtime.GC and
// debug.FreeOSMemory to the process's count of forced GC cycles
// (ForcedGCSites), from now until detach is called. It returns
// ErrNoRuntimeMode unless the binary was built in the runtime build mode
// (RuntimeMode).
//
// The runtime keeps the tokens of w's entries with the registrations, so
// one Watcher only may ever be attached in a process: attaching another
// after it is an error. Attachments nest: the hooks stay on until every
// detach has been called (detach is idempotent). While detached,
// registrations are not counted (the runtime's hook is a call that
// returns at once; before the first attachment, a nil check), while the
// registrations counted before are: their runs, clears and Stops while
// detached are counted as they happen, so that the ledger's counts stay
// exact across any sequence of attach and detach.
func (w *Watcher) AttachRuntime() (detach func(), err error) {
	if !rtLinked() {
		return nil, ErrNoRuntimeMode
	}
	if v := rtVersion(); v != rtHookVersion {
		return nil, fmt.Errorf("finalizerwatch: (*Watcher).AttachRuntime: the runtime was patched by a finalizercheck whose hooks are version %d, and this gcprobe's are version %d: run finalizercheck -runtime of the same gcprobe version as the module", v, rtHookVersion)
	}
	rtMu.Lock()
	defer rtMu.Unlock()
	if cur := rtW.Load(); cur != nil && cur != w {
		return nil, errors.New("finalizerwatch: (*Watcher).AttachRuntime: another Watcher is attached to the runtime (one per process; the probe attaches Default)")
	}
	w.init()
	rtW.Store(w)
	rtAttachN++
	forcedInit()
	forcedOn.Store(true)
	rtOnP.Store(true)
	rtStore(unsafe.Pointer(&rtTable))
	var once sync.Once
	return func() {
		once.Do(func() {
			rtMu.Lock()
			defer rtMu.Unlock()
			if rtAttachN--; rtAttachN == 0 {
				rtStore(unsafe.Pointer(&rtDetached))
				forcedOn.Store(false)
			}
		})
	}, nil
}

// fromPC returns the part of a stack captured inside the hook that begins
// at the registering frame: at pc, the return PC into the caller of
// runtime.SetFinalizer or AddCleanup that the runtime passes
// (sys.GetCallerPC). The frames between (the hook's, the runtime's) are
// found by that PC rather than counted, so that inlining decisions in
// either cannot shift the stack.
//
// pc is not among them where the caller of the runtime function keeps no
// frame record: reflect.Value.Call calls a function through the runtime's
// assembly trampolines (runtime.call32 and its siblings, asm_amd64.s's
// CALLFN), which save no frame pointer, so a frame-pointer walk goes from
// runtime.SetFinalizer straight to reflect.Value.call, as runtime.Callers
// does (it elides them as wrappers); and a walk that fell back to
// runtime.Callers may write another PC for an inlined frame. The stack
// then begins above the frames of the hook (gcprobe's) and of the
// runtime below it. Were it kept whole, the hook's own frames would make
// the registration look like gcprobe's own, and it would not be counted.
func fromPC(pcs []uintptr, pc uintptr) []uintptr {
	for i, p := range pcs {
		if p == pc {
			return pcs[i:]
		}
	}
	i := 0
	for i < len(pcs) && stackcapture.OriginOf(pcs[i]) == stackcapture.OriginGcprobe {
		i++
	}
	for i < len(pcs) && inRuntimePackage(pcs[i]) {
		i++
	}
	if i == len(pcs) {
		return pcs
	}
	return pcs[i:]
}

// inRuntimePackage reports whether the function at return PC pc is
// package runtime's (not runtime/x's, nor a module's whose path begins
// with "runtime.").
func inRuntimePackage(pc uintptr) bool {
	fs := stackcapture.PCFrames(pc)
	if len(fs) == 0 {
		return false
	}
	fn := fs[len(fs)-1].Function // the physical function, not one inlined into it
	rest, ok := strings.CutPrefix(fn, "runtime.")
	if i := strings.IndexByte(rest, '['); i >= 0 {
		rest = rest[:i]
	}
	return ok && !strings.Contains(rest, "/")
}

// rtFinalizerSet and rtCleanupAdd are the registration hooks. A
// registration at a return PC the cache knows (a line that registered
// before, in the user's or a dependency's code), in a GC cycle its entry
// has seen, takes the fast path: a cache load and a load of the clock and
// of the entry's latest cycle (register); the runtime counts it on its P
// (rtpcounts.go). A registration inside the standard library at a PC whose
// record matches the stack's first frames (rtInd) takes it too, after a
// short walk. Nothing on it can panic (every pointer it follows is set
// before the record is published), so it runs without rtRegister's
// deferred recover; every other registration, the entry's first in a cycle among them
// (which folds its ring), goes to rtRegister.
func rtFinalizerSet(typ unsafe.Pointer, pc uintptr) uint64 {
	if c := rtPCs[KindFinalizer][rtPCSlot(pc)].Load(); c != nil && c.pc == pc {
		if tok, ok := c.register(); ok {
			return tok
		}
	} else if tok, ok := rtIndRegister(KindFinalizer, typ, pc); ok {
		return tok
	}
	return rtRegister(KindFinalizer, typ, pc)
}

func rtCleanupAdd(typ unsafe.Pointer, pc uintptr) uint64 {
	if c := rtPCs[KindCleanup][rtPCSlot(pc)].Load(); c != nil && c.pc == pc {
		if tok, ok := c.register(); ok {
			return tok
		}
	} else if tok, ok := rtIndRegister(KindCleanup, typ, pc); ok {
		return tok
	}
	return rtRegister(KindCleanup, typ, pc)
}

// register returns the token of a registration at the record's site,
// for the runtime to count on its P (rtTokOnP), if the entry's ring was
// folded for the current cycle; otherwise it returns false.
func (c *rtPC) register() (tok uint64, ok bool) {
	cyc := c.cycles.Load()
	if cyc != c.s.ages.seen.Load() {
		return 0, false
	}
	return c.id | uint64(cyc&tokCycleMask)<<runIDBits | rtTokOnP, true
}

// rtRegister counts a registration of kind k on an object of type typ
// made at the return PC pc, and returns its token, or 0 if it is not
// counted.
//
//go:noinline
func rtRegister(k Kind, typ unsafe.Pointer, pc uintptr) (tok uint64) {
	w := rtW.Load()
	if w == nil {
		return 0
	}
	defer func() {
		// The hook runs inside the runtime's SetFinalizer: nothing may
		// escape from it. A registration the ledger failed on is not
		// counted.
		if recover() != nil {
			tok = 0
		}
	}()
	s := w.rtSiteFor(k, pc, typ)
	if s == nil {
		return 0
	}
	id := w.runID(s)
	if id == 0 {
		return 0
	}
	if s.pc == pc && !s.indirect {
		// The site of pc itself (not one found above a standard-library
		// frame at pc, nor the overflow entry): pc's next registrations
		// take the hook's fast path. Its record stays: the entry's first
		// registration in each cycle comes here too.
		slot := &rtPCs[k][rtPCSlot(pc)]
		if c := slot.Load(); c == nil || c.pc != pc {
			slot.Store(&rtPC{pc: pc, s: s, id: uint64(id), cycles: &w.cycles[k]})
		}
	}
	if w.cycles[k].Load() != s.ages.seen.Load() {
		// The entry's first registration in a cycle observes it for the
		// growth model: with the P's counts in the ledger first.
		rtSettleCycle(w)
	}
	cyc := w.enterCycle(s)
	return uint64(id) | uint64(cyc&tokCycleMask)<<runIDBits | rtTokOnP
}

// rtPCs caches, per kind, the entries of return PCs that are a site of
// their own (the user's direct calls): a direct-mapped table of immutable
// records, read with one atomic load, so that a registration at a known
// line skips the site table's hashing and probing, and the entry's
// cache lines other than its registrations' (the record carries the
// entry's id and the clock). Two PCs that map to one slot take turns in
// it. The records are the attached Watcher's, the only one ever attached
// (AttachRuntime).
var rtPCs [numKinds][1 << rtPCBits]atomic.Pointer[rtPC]

const rtPCBits = 9

func rtPCSlot(pc uintptr) uint64 { return (uint64(pc) * 0x9e3779b97f4a7c15) >> (64 - rtPCBits) }

type rtPC struct {
	pc     uintptr
	s      *site
	id     uint64         // s's runID, never 0
	cycles *atomic.Uint32 // the clock of s's kind: &s.w.cycles[s.kind]
}

// rtInd caches, per kind, what a registration made inside the standard
// library at a return PC resolved to in rtIndirectSite's first step: the
// frames from that PC up to the program's line that keys its entry (the
// user's os.Open line above os.Open's four) and the entry's record. A
// registration at the PC whose walk begins with the same frames is that
// entry's, as rtIndirectSite would find it, without classifying each
// frame (OriginOf) and looking the entry up: a file's open touches a few
// cache lines of the ledger fewer, which after the system call are cold.
// The records are immutable, in slots chosen by the walk's first frames
// (rtIndSlot). A record is valid for the look-through set's generation it was made
// in (stackcapture.OriginGeneration), as OriginOf's own answers are.
var rtInd [numKinds][1 << rtPCBits]atomic.Pointer[rtIndRec]

// rtIndPCs holds, per kind and rtPCSlot, the latest PC a record was made
// for: a registration at a PC that has none (a new line, gcprobe's own, a
// direct site whose cache slot another PC took) does not walk its stack
// to look for one.
var rtIndPCs [numKinds][1 << rtPCBits]atomic.Uintptr

// rtIndFrames bounds the frames a record keeps, from the PC to the
// program's line: os.Open's are four, net.Dial's about ten.
const rtIndFrames = 12

type rtIndRec struct {
	pc     uintptr
	typ    unsafe.Pointer
	gen    uint32
	n      int
	frames [rtIndFrames]uintptr // frames[:n]: from pc to the program's line
	c      rtPC                 // the entry's record (c.pc unused)
}

// rtIndRegister is rtIndirectSite's first step answered from rtInd: the
// token of a registration of kind k on an object of type typ at return
// PC pc, counted on the P, if a record for pc matches the stack and the
// entry's ring was folded for the current cycle; otherwise false.
//
//go:noinline
func rtIndRegister(k Kind, typ unsafe.Pointer, pc uintptr) (uint64, bool) {
	if rtIndPCs[k][rtPCSlot(pc)].Load() != pc {
		return 0, false
	}
	var pcs [rtShortWalk]uintptr
	n := stackcapture.Callers(0, pcs[:]) // this hook's frames, the runtime's, then pc's
	i := 0
	for i < n && pcs[i] != pc {
		i++
	}
	stack := pcs[i:n]
	r := rtInd[k][rtIndSlot(stack)].Load()
	if r == nil || r.pc != pc || r.typ != typ || r.gen != stackcapture.OriginGeneration() || len(stack) < r.n {
		return 0, false
	}
	for j, f := range r.frames[:r.n] {
		if stack[j] != f {
			return 0, false
		}
	}
	return r.c.register()
}

// rtIndWalked counts the registrations rtIndRemember saw: those that a
// record could have served and that walked and classified their frames
// (the tests' measure of the records' hits).
var rtIndWalked atomic.Uint64

// rtIndHashFrames is how many frames of a walk from the PC choose its
// record's slot: every os.Open reaches one PC (os.newFile's), so the PC
// alone would make the lines that open files take turns in one slot,
// each turn a new record.
const rtIndHashFrames = 8

// rtIndSlot returns the slot of rtInd for a walk that begins at the PC
// with stack: a hash of its first rtIndHashFrames frames (all, if fewer).
// Both sides walk at least that far above the PC: rtIndirectSite's walk
// has rtShortWalk frames, of which its own and the runtime's are seven.
func rtIndSlot(stack []uintptr) uint64 {
	h := uint64(0)
	for _, p := range stack[:min(len(stack), rtIndHashFrames)] {
		h = (h ^ uint64(p)) * 0x9e3779b97f4a7c15
	}
	return h >> (64 - rtPCBits)
}

// rtIndRemember records, for rtIndRegister, that a registration of kind
// k on type typ at pc whose walk from pc is stack resolved to entry s at
// stack[at], in the look-through set's generation gen. A slot's record
// is kept until the generation moves: two walks that take one slot do
// not take turns in it (each turn would allocate a record); the second
// walks and classifies its frames, as without the record.
func (w *Watcher) rtIndRemember(k Kind, pc uintptr, typ unsafe.Pointer, stack []uintptr, at int, s *site, gen uint32) {
	rtIndWalked.Add(1)
	if at+1 > rtIndFrames || s.indirect || s == &w.overflow[k] {
		return
	}
	slot := &rtInd[k][rtIndSlot(stack)]
	if r := slot.Load(); r != nil && r.gen == gen {
		return
	}
	id := w.runID(s)
	if id == 0 {
		return
	}
	r := &rtIndRec{pc: pc, typ: typ, gen: gen, n: at + 1, c: rtPC{s: s, id: uint64(id), cycles: &w.cycles[k]}}
	copy(r.frames[:], stack[:at+1])
	slot.Store(r)
	rtIndPCs[k][rtPCSlot(pc)].Store(pc)
}

// rtSiteFor returns the entry for a registration of kind k whose
// caller's return PC is pc, or nil for gcprobe's own.
//
//go:noinline
func (w *Watcher) rtSiteFor(k Kind, pc uintptr, typ unsafe.Pointer) *site {
	h, key := pcKey(k, pc)
	s := w.sites.Get(h, key)
	if s == nil {
		switch stackcapture.OriginOf(pc) {
		case stackcapture.OriginUser:
			// The user's (or a dependency's) own call: its site, as the
			// drop-in's siteFor keeps it, with the first stack.
			if w.sites.Len() >= w.sites.Limit() {
				return &w.overflow[k]
			}
			var pcs [stackcapture.MaxDepth]uintptr
			n := stackcapture.CallersChecked(0, pcs[:])
			stk := w.stacks.Intern(fromPC(pcs[:n], pc))
			if s = w.sites.LoadOrInit(h, key, func(s *site) { w.initSite(s, k, pc, stk) }); s == nil {
				return &w.overflow[k]
			}
			return s
		case stackcapture.OriginGcprobe:
			s = w.sites.LoadOrInit(h, key, func(s *site) { s.w, s.kind, s.pc, s.indirect, s.own = w, k, pc, true, true })
		default:
			v := resVariantAt(pc)
			s = w.sites.LoadOrInit(h, key, func(s *site) { s.w, s.kind, s.pc, s.indirect, s.variant = w, k, pc, true, v })
		}
		if s == nil {
			return &w.overflow[k]
		}
	}
	switch {
	case !s.indirect:
		return s
	case s.own:
		return nil
	}
	return w.rtIndirectSite(k, pc, typ, s.variant)
}

// rtIndirectSite finds the site of a registration the runtime was asked
// for from the standard library, reflection or a wrapper: the first frame
// above outside them (a user's os.Open line), or, on a goroutine that the
// standard library started (net/http's dialer), the line that caused that
// goroutine, its origin (rtorigin.go). Its entry is keyed by that frame's
// PC and the object's type, so that a line that opens files and starts
// processes keeps them apart.
//
// It walks rtShortWalk frames first: a line that registered before is
// found there without walking the rest of a deep stack (a reconcile's,
// thirty frames and more, of which the walk reads each). The whole stack
// is walked again for a new entry, which keeps it, and where the short
// walk found no frame of the user's. (Whether the short walk was cut
// cannot be told from its length: a walk is cut where runtime.Callers
// would cut it, counting inlined frames, so it may stop short of
// rtShortWalk PCs with the stack going on.)
//
//go:noinline
func (w *Watcher) rtIndirectSite(k Kind, pc uintptr, typ unsafe.Pointer, variant uint8) *site {
	gen := stackcapture.OriginGeneration() // before the frames are classified
	var pcs [stackcapture.MaxDepth]uintptr
	n := stackcapture.Callers(0, pcs[:rtShortWalk])
	stack, at, own := siteFrame(pcs[:n], pc)
	if own {
		return nil
	}
	if at >= 0 {
		if s := w.sites.Get(rtSiteKey(k, stack[at], typ, variant)); s != nil {
			w.rtIndRemember(k, pc, typ, stack, at, s, gen)
			return s
		}
	}
	n = stackcapture.Callers(0, pcs[:])
	stack, at, own = siteFrame(pcs[:n], pc)
	if own || len(stack) == 0 {
		return nil
	}
	if at >= 0 && w.lookThroughOneLiner(stack, at) {
		stack, at, _ = siteFrame(pcs[:n], pc) // the helper now skipped
		if at >= 0 {
			if s := w.sites.Get(rtSiteKey(k, stack[at], typ, variant)); s != nil {
				return s
			}
		}
	}
	if at >= 0 {
		return w.rtNewIndirect(k, stack[at], typ, variant, stack, false)
	}
	// No frame of the program's on this goroutine: its origin's line.
	opc, tag := goroutineOrigin()
	if tag == originTagHTTPClient && variant == resVariantNone {
		variant = resVariantHTTPClient
	}
	switch {
	case opc == 0:
		// None known (a goroutine started before the hooks were on, by
		// the runtime, or from a timer): the goroutine's first function,
		// above runtime.goexit, keys the entry, which is named by its
		// resource and purpose, never by that (standard library) frame.
		return w.rtNewIndirect(k, stack[max(0, len(stack)-2)], typ, variant, stack, true)
	case stackcapture.OriginOf(opc) == stackcapture.OriginGcprobe:
		return nil // a goroutine gcprobe's own code caused
	}
	if s := w.sites.Get(rtSiteKey(k, opc, typ, variant)); s != nil {
		return s
	}
	// The stack kept ends at the origin, in the place of runtime.goexit
	// (or of the last frame of a stack cut at MaxDepth): a profile shows
	// the user's line as what the goroutine came from.
	var withOrigin [stackcapture.MaxDepth]uintptr
	m := copy(withOrigin[:], stack)
	switch {
	case m > 0 && inRuntimePackage(withOrigin[m-1]), m == len(withOrigin):
		withOrigin[m-1] = opc
	default:
		withOrigin[m] = opc
		m++
	}
	return w.rtNewIndirect(k, opc, typ, variant, withOrigin[:m], false)
}

// rtNewIndirect returns the indirect entry of kind k keyed by the frame
// at, type typ and variant, adding it with stack, unless the site table is
// full. An unattributed entry (no frame of the program's caused the
// registration) is named by its resource and purpose (unattributedFrame).
func (w *Watcher) rtNewIndirect(k Kind, at uintptr, typ unsafe.Pointer, variant uint8, stack []uintptr, unattributed bool) *site {
	h, key := rtSiteKey(k, at, typ, variant)
	if s := w.sites.Get(h, key); s != nil {
		return s
	}
	if w.sites.Len() >= w.sites.Limit() {
		return &w.overflow[k]
	}
	res := resourceIndex(typ, variant)
	var frame *stackcapture.Frame
	if unattributed {
		frame = unattributedFrame(res)
	}
	stk := w.stacks.Intern(stack)
	if s := w.sites.LoadOrInit(h, key, func(s *site) {
		w.initSite(s, k, at, stk)
		s.res = res
		if frame != nil {
			s.frame.Store(frame)
		}
	}); s != nil {
		return s
	}
	return &w.overflow[k]
}

// unattributedFrame is the site of registrations on a goroutine that
// the standard library or the runtime started, of which no origin is
// known: the resource registered and its purpose, never a frame of the
// toolchain's source, which no user can change.
func unattributedFrame(res uint8) *stackcapture.Frame {
	name := resourceOf(res).Name
	if name == "" {
		name = "object"
	}
	return &stackcapture.Frame{Function: name, File: "(on a goroutine the standard library started; no line of the program's caused it)"}
}

// rtShortWalk is how many frames rtIndirectSite walks first: the hooks'
// own four or five, the standard library's (os.Open's four, net.Dial's
// about ten) and the user's line above them.
const rtShortWalk = 20

// siteFrame finds, in pcs walked from the hook, the registration's stack
// (from its return PC pc on) and in it the first frame of the user's, at
// (-1 if none); own reports a frame of gcprobe's library code before it:
// the registration is gcprobe's own, through the standard library.
func siteFrame(pcs []uintptr, pc uintptr) (stack []uintptr, at int, own bool) {
	stack = fromPC(pcs, pc)
	for i, p := range stack {
		switch stackcapture.OriginOf(p) {
		case stackcapture.OriginGcprobe:
			return stack, -1, true
		case stackcapture.OriginUser:
			return stack, i, false
		}
	}
	return stack, -1, false
}

// rtSiteKey is the key of the entry of an indirect registration of kind k
// at the user's pc, of an object of type typ registered as variant (a
// type's address is a multiple of 8: the variant fits below it).
func rtSiteKey(k Kind, pc uintptr, typ unsafe.Pointer, variant uint8) (uint64, siteKey) {
	h, key := pcKey(k, pc)
	key.hash = uint64(uintptr(typ)) | uint64(variant&7)
	return h ^ key.hash*0x9e3779b97f4a7c15, key
}

// rtFinalizerClear and rtCleanupStop are the clear hooks, for the clears
// and Stops the P's table had no room for (rtpcounts.go): a token decode
// and the entry's one atomic add (a Stop's two: see countCleared), with
// the clock the decode read.
func rtFinalizerClear(tok uint64) {
	if s, cyc, cur := rtTokenSite(KindFinalizer, tok); s != nil {
		countClearedAt(KindFinalizer, s, nil, cyc, cur)
	}
}

func rtCleanupStop(tok uint64) {
	if s, cyc, cur := rtTokenSite(KindCleanup, tok); s != nil {
		countClearedAt(KindCleanup, s, nil, cyc, cur)
	}
}

// rtTokenSite returns the entry and registration cycle a token names, or
// nil, and the clock of kind k it read, cur.
func rtTokenSite(k Kind, tok uint64) (s *site, cyc, cur uint32) {
	w := rtW.Load()
	if w == nil { // cannot be: set before the hooks are, never unset
		return nil, 0, 0
	}
	if s = w.running.lookup(uint32(tok & runIDMask)); s == nil {
		return nil, 0, 0
	}
	cur = w.cycles[k].Load()
	return s, cur - (cur-uint32(tok>>runIDBits))&tokCycleMask, cur
}

func rtFinalizerStart(tok uint64) uint64 { return rtStart(KindFinalizer, tok) }
func rtCleanupStart(tok uint64) uint64   { return rtStart(KindCleanup, tok) }

// rtStart records the start of a counted callback and returns its state
// for rtDone: the start (monoNow, which is never 0 after clockBase) and,
// in the low bits, the running slot taken plus one (0: none).
func rtStart(k Kind, tok uint64) uint64 {
	s, _, _ := rtTokenSite(k, tok)
	if s == nil {
		return 0
	}
	start := monoNow()
	slot := s.w.begin(k, s, start)
	i := uint64(0)
	if slot != nil {
		slots := &s.w.running.slots[k]
		for j := range slots {
			if &slots[j].w == slot {
				i = uint64(j) + 1
			}
		}
	}
	return uint64(start)<<5 | i
}

func rtFinalizerDone(tok, state uint64) { rtDone(KindFinalizer, tok, state) }
func rtCleanupDone(tok, state uint64)   { rtDone(KindCleanup, tok, state) }

// rtDone counts a callback's run, which rtStart began with state.
func rtDone(k Kind, tok, state uint64) {
	s, cyc, cur := rtTokenSite(k, tok)
	if s == nil {
		return
	}
	if i := state & 31; i != 0 {
		end(&s.w.running.slots[k][i-1].w)
	}
	s.executed.Add(1)
	s.doneAt(cyc, cur)
	if start := int64(state >> 5); state != 0 && timed() {
		s.dur.observe(time.Duration(monoNow() - start))
	}
}

// Resources: what the standard library registered, by the registered
// object's type. A few of them finalize only what was dropped without
// Close: for those a run is a bug at the site (Dropped).

// Resource describes the type of object a runtime-mode entry registered
// through the standard library.
type Resource struct {
	// Name is the type as users know it ("os.File", "net.Conn"), or the
	// registered type's own name.
	Name string
	// DroppedWithoutClose reports that the standard library clears this
	// type's finalizer or cleanup when it is closed (Close, Release,
	// Wait), so that every run of it is an object the program dropped
	// without closing: a descriptor or handle held until the collector
	// found it.
	DroppedWithoutClose bool
	// Leak, if set, says what a growing site of this resource leaks,
	// where its purpose tells it: a connection of net/http's Transport
	// is held beyond the idle pool only while a response body is open,
	// so that a site whose connections grow did not close its bodies
	// (SiteStats.Leak).
	Leak string
	// Accepted reports a connection the program accepted: its peer
	// decides how long it is open (a client's keep-alive, or a client's
	// unclosed response body), so that a site of them ranks after the
	// other sites of its class (the growing, the stable), where the
	// peer's own line, in this program, would be.
	Accepted bool
}

// knownResources names the standard library's registrations by the
// registered type, and marks those whose run means a missing Close
// (go1.26: os/file_unix.go newFile, cleared by (*file).close;
// net/fd_posix.go setAddr, cleared by Close; os/root_unix.go newRoot,
// cleared by (*root).Close; os/exec.go newHandleProcess's AddCleanup,
// stopped by Release and Wait). The others run for any object collected:
// internal/poll/splice_linux.go's pipes (whenever sync.Pool drops them),
// crypto/tls/cache.go's certificate cache entries, os/exec's Cmd under
// GODEBUG=execwait. Another type keeps its own name.
var knownResources = map[string]Resource{
	"os.file":          {Name: "os.File", DroppedWithoutClose: true},
	"net.netFD":        {Name: "net.Conn", DroppedWithoutClose: true},
	"os.root":          {Name: "os.Root", DroppedWithoutClose: true},
	"os.Process":       {Name: "os.Process", DroppedWithoutClose: true},
	"poll.splicePipe":  {Name: "splice pipe"},
	"x509.Certificate": {Name: "tls certificate cache"},
	"exec.Cmd":         {Name: "exec.Cmd"},
}

// Resource variants: what a registration of a type registers, where the
// type alone does not tell. net's sockets are one type (netFD), whether a
// connection or a listener: net.Listen's is registered in
// (*netFD).listenStream, net.ListenPacket's in listenDatagram (into
// which go1.26 inlines setAddr, the registering function), an accepted
// connection's in (*netFD).accept, a dialed one's in (*netFD).dial. A
// dialed connection's purpose is told by the goroutine that dialed it:
// one started by net/http's Transport (its origin's tag) is an HTTP
// client's. (The variant is kept in 3 bits of the entry's key:
// rtSiteKey.)
const (
	resVariantNone       uint8 = iota
	resVariantListener         // a stream listener (net.Listener)
	resVariantPacket           // a bound packet socket (net.PacketConn)
	resVariantAccepted         // a connection a listener accepted
	resVariantHTTPClient       // a connection dialed for net/http's Transport (rtorigin.go's tag)
	resVariants                // how many there are (at most 8)
)

// resVariantAt returns the variant of the registrations at return PC pc
// inside the standard library: symbolized once per PC, when its indirect
// entry is made. Built with inlining off (-gcflags=-l), pc is in setAddr
// itself and a listener reads as a connection.
func resVariantAt(pc uintptr) uint8 {
	for _, f := range stackcapture.PCFrames(pc) {
		switch f.Function {
		case "net.(*netFD).listenStream":
			return resVariantListener
		case "net.(*netFD).listenDatagram":
			return resVariantPacket
		case "net.(*netFD).accept":
			return resVariantAccepted
		}
	}
	return resVariantNone
}

// variantResources name the variants of known types.
var variantResources = map[string][resVariants]Resource{
	"net.netFD": {
		resVariantListener: {Name: "net.Listener", DroppedWithoutClose: true},
		resVariantPacket:   {Name: "net.PacketConn", DroppedWithoutClose: true},
		resVariantAccepted: {Name: "net.Conn (accepted)", DroppedWithoutClose: true, Accepted: true},
		resVariantHTTPClient: {Name: "net.Conn (HTTP client)", DroppedWithoutClose: true,
			Leak: "HTTP response body not closed (each open body holds its connection)"},
	},
}

// maxResources bounds the resource table: types past it share the last
// entry.
const maxResources = 255

type resKey struct {
	typ     unsafe.Pointer
	variant uint8
}

var (
	resMu     sync.Mutex // guards resByType and the growth of resources
	resByType = map[resKey]uint8{}
	resN      int // entries of resources in use, index 0 (none) included
	// resources are read without the lock: each entry is stored once.
	resources [maxResources + 1]atomic.Pointer[Resource]
)

// resourceIndex returns the index of the Resource of typ registered as
// variant, adding it.
func resourceIndex(typ unsafe.Pointer, variant uint8) uint8 {
	if typ == nil {
		return 0
	}
	resMu.Lock()
	defer resMu.Unlock()
	rk := resKey{typ, variant}
	if i, ok := resByType[rk]; ok {
		return i
	}
	if resN == 0 {
		resN = 1
	}
	if resN >= maxResources {
		resources[maxResources].CompareAndSwap(nil, &Resource{Name: "(other types)"})
		return maxResources
	}
	var x any
	(*eface)(unsafe.Pointer(&x)).typ = typ
	t := reflect.TypeOf(x)
	r, ok := knownResources[t.String()]
	if !ok {
		r = Resource{Name: t.String()}
	}
	if vr, ok := variantResources[t.String()]; ok && int(variant) < len(vr) && vr[variant].Name != "" {
		r = vr[variant]
	}
	i := uint8(resN)
	resN++
	resources[i].Store(&r)
	resByType[rk] = i
	return i
}

// resourceOf returns the Resource of index i: an atomic load.
func resourceOf(i uint8) Resource {
	if r := resources[i].Load(); r != nil {
		return *r
	}
	return Resource{}
}
