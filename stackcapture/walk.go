package stackcapture

import (
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Whole-stack frame-pointer unwinding for Callers.
//
// The walk follows the chain of saved frame pointers the way the runtime's
// execution tracer does (runtime/tracestack.go, fpTracebackPCs): in a Go
// frame the word at the frame pointer is the caller's frame pointer and the
// word above it the return address into the caller. The tracer then turns
// physical return addresses into logical frames when it writes the trace
// (fpunwindExpand, with runtime/symtab.go's inline unwinder); here
// runtime.CallersFrames does that when a stack is symbolized, so the walk
// only has to decide, per return address, what runtime.Callers would have
// done with that physical frame (runtime/traceback.go, tracebackPCs):
//
//   - write one PC per logical frame, inlined calls included: the walk
//     writes the physical return address once and counts the logical
//     frames runtime.CallersFrames will expand it into, so that skip and
//     truncation fall where runtime.Callers puts them;
//   - hide wrappers (functions whose FuncID is FuncIDWrapper) unless the
//     frame below is a panic function (elideWrapperCalling);
//   - stop after runtime.goexit, the bottom frame of every goroutine.
//
// The tracer itself does not walk frame pointers when cgo frames may be on
// the stack (traceStack's mp.hasCgoOnStack()), nor does this walk: it
// never follows the saved frame pointer of a frame unless the return
// address into that frame has a cached verdict saying it is an ordinary Go
// function. Functions that switch stacks, are entered from C or from a
// signal, or otherwise do not keep a normal frame (runtime.cgocallback,
// asmcgocall, systemstack, mcall, morestack, mstart, rt0_go, sigpanic,
// sigtramp, asyncPreempt, crosscall2, _cgoexp_*, any PC outside Go text)
// get an "untrusted" verdict; meeting one sends the capture to
// runtime.Callers, whose unwinder knows how to cross them.
//
// The walk makes no call that is not inlined between reading the frame
// pointer register and returning, so the goroutine's stack cannot be
// copied (moved) under it: stacks move only when a function's prologue
// grows the stack or when the garbage collector shrinks it at a
// synchronous safe point, never at an asynchronous preemption
// (runtime/stack.go, isShrinkStackSafe). Verdicts for unknown PCs are
// computed after the walk has returned, and the walk is then restarted.

// A verdict is cached per return address in one atomic word: the PC in the
// low 48 bits (user-space code addresses on amd64 and arm64 fit), flags
// above. The zero word is an empty slot.
const (
	vPresent   = uint64(1) << 48 // the slot holds a verdict
	vUntrusted = uint64(1) << 49 // not an ordinary Go frame: fall back
	vWrapper   = uint64(1) << 50 // a wrapper runtime.Callers hides
	vPanicky   = uint64(1) << 51 // gopanic or panicwrap: a wrapper above it is shown
	vBottom    = uint64(1) << 52 // runtime.goexit: the last frame
	vCountLow  = 56              // logical frames at this PC, 1 to 255
	pcMask     = uint64(1)<<48 - 1
)

const (
	verdictBits = 13
	verdictWays = 4 // words per set: one set is half a cache line
)

// verdicts is a cache of per-PC verdicts: 8192 words (64 KiB), fixed for
// the life of the process, 4-way set-associative. A PC's set is chosen by
// its hash; it goes into the first empty word of the set, and once the set
// is full, over the word its own bits choose. Direct-mapped, two PCs of
// one stack that hashed alike evicted each other on every capture, each
// miss recomputing a verdict (FuncForPC and CallersFrames, allocating)
// until the capture gave up: seen in a race-detector build, at 128
// allocations per registration.
var verdicts [1 << verdictBits]atomic.Uint64

func verdictSet(pc uintptr) []atomic.Uint64 {
	i := (uint64(pc) * 0x9e3779b97f4a7c15) >> (64 - verdictBits + 2) << 2
	return verdicts[i : i+verdictWays : i+verdictWays]
}

// lookupVerdict returns the cached verdict for pc, or 0 if there is none.
func lookupVerdict(pc uintptr) uint64 {
	if pc == 0 || uint64(pc)&^pcMask != 0 {
		return vPresent | vUntrusted
	}
	set := verdictSet(pc)
	for i := range set {
		if w := set[i].Load(); w&pcMask == uint64(pc) {
			return w &^ pcMask
		}
	}
	return 0
}

// fillVerdict computes and caches the verdict for the return address pc.
func fillVerdict(pc uintptr) {
	if pc == 0 || uint64(pc)&^pcMask != 0 {
		return
	}
	storeVerdict(pc, uint64(pc)|classify(pc))
}

// storeVerdict caches the verdict word w of pc in pc's set.
func storeVerdict(pc uintptr, w uint64) {
	set := verdictSet(pc)
	for i := range set {
		if old := set[i].Load(); old&pcMask == uint64(pc) {
			set[i].Store(w) // already cached (a racing fill)
			return
		}
	}
	for i := range set {
		if set[i].CompareAndSwap(0, w) {
			return
		}
	}
	set[(pc>>4)%verdictWays].Store(w)
}

// classify computes the verdict for the return address pc: the function
// it returns into (the physical frame, not a function inlined there) and
// the number of logical frames runtime.CallersFrames expands it into.
func classify(pc uintptr) uint64 {
	untrusted := vPresent | vUntrusted
	f := runtime.FuncForPC(pc - 1) // the call instruction, as CallersFrames does
	if f == nil {
		return untrusted // not Go text: C, a signal trampoline's caller, junk
	}
	entry := f.Entry() // the physical function's, also for an inlined f
	phys := runtime.FuncForPC(entry)
	if phys == nil || phys.Entry() != entry {
		return untrusted
	}
	name := phys.Name()
	file, _ := phys.FileLine(entry)
	if untrustedFunc(name, file) {
		return untrusted
	}
	v := vPresent
	switch name {
	case "runtime.goexit":
		v |= vBottom
	case "runtime.gopanic", "runtime.panicwrap":
		v |= vPanicky
	}
	switch id := funcID(phys); {
	case id == funcIDWrapper && f.Name() != name:
		// The wrapper's body is inlined here: pc returns into a
		// function inlined into the wrapper (a value method into its
		// pointer wrapper, say). runtime.Callers shows the inlined
		// frames and hides only the wrapper's own, outermost one
		// (tracebackPCs), and so does runtime.CallersFrames when it
		// expands pc (Frames.Next skips the wrapper around an inlined
		// frame), so the frames counted below are the ones shown: an
		// ordinary frame.
	case id == funcIDWrapper:
		v |= vWrapper
	case id != 0 && name != "runtime.goexit" && name != "runtime.gopanic" && name != "runtime.panicwrap" &&
		name != "runtime.main" && name != "runtime.runFinalizers" && name != "runtime.runCleanups":
		return untrusted // a special function not known to keep a normal frame
	}
	// Count the frames pc expands into. A lone PC is not expanded (Frames.Next
	// in runtime/symtab.go looks for the next PC in its list), so follow it
	// with a PC outside Go text and count the frames of pc's function.
	k := 0
	frames := runtime.CallersFrames([]uintptr{pc, 0})
	for {
		fr, more := frames.Next()
		if fr.Entry == entry {
			k++
		}
		if !more {
			break
		}
	}
	if k < 1 || k > 255 {
		return untrusted
	}
	return v | uint64(k)<<vCountLow
}

// untrustedFunc reports whether the physical function name (defined in
// file) may lack an ordinary frame: the stack-switching and C-facing
// functions of runtime/asm_*.s, runtime/cgo and runtime/sys_*.s, the
// functions the runtime enters by injecting a call (sigpanic,
// asyncPreempt, debugCall*), and assembly in general, except the few
// whose frames are known (runtime.goexit, the bottom frame, whose frame
// pointer is never followed, and the reflectcall trampolines
// runtime.callNN, which have a fixed-size frame).
func untrustedFunc(name, file string) bool {
	for _, p := range [...]string{
		"runtime.cgocallback", "runtime.asmcgocall", "runtime.cgocall",
		"runtime.sigpanic", "runtime.sigtramp", "runtime.cgoSigtramp",
		"runtime.sigreturn", "runtime.systemstack", "runtime.mcall",
		"runtime.morestack", "runtime.mstart", "runtime.rt0_go",
		"runtime.gogo", "runtime.asyncPreempt", "runtime.debugCall",
		"runtime.abort", "runtime.corostart", "runtime.handleAsyncEvent",
		"runtime.gcBgMarkWorker", "runtime.racecall", "runtime.gosave",
		"crosscall2", "_cgoexp_", "_cgo_", "x_cgo", "runtime/cgo.",
	} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if strings.HasSuffix(file, ".s") {
		return name != "runtime.goexit" && !isReflectCall(name)
	}
	return false
}

// isReflectCall reports whether name is one of runtime.call16 ...
// runtime.call1073741824, the frames reflect.Value.Call runs a function
// from (runtime/asm_*.s, CALLFN; marked WRAPPER there).
func isReflectCall(name string) bool {
	rest, ok := strings.CutPrefix(name, "runtime.call")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// funcIDWrapper is abi.FuncIDWrapper (internal/abi/symtab.go): the FuncID
// of every function the compiler or assembler marks as a wrapper (method
// and method-value wrappers, ABI wrappers, the closures of go and defer
// statements and of generic function values, runtime.deferreturn,
// runtime.callNN), the ones runtime.Callers hides.
const funcIDWrapper = 23

// funcIDOffset is the offset of funcID in the runtime's _func
// (runtime/runtime2.go): ten 32-bit fields precede it.
const funcIDOffset = 40

// funcID reads the FuncID of the function f, which must be a *Func for a
// function entry (runtime.FuncForPC returns the runtime's own _func
// record for a PC outside inlined code; runtime/symtab.go, FuncForPC).
// The layout is the runtime's, not an API: funcIDLayoutOK checks it once
// against functions whose FuncID is known, and Callers' calibration
// against runtime.Callers; any disagreement turns the walk off.
func funcID(f *runtime.Func) uint8 {
	return *(*uint8)(unsafe.Add(unsafe.Pointer(f), funcIDOffset))
}

// funcIDLayoutOK checks funcID on runtime.goexit (abi.FuncID_goexit, 8)
// and an ordinary function (0); goexitPC is a return address into
// runtime.goexit. Wrappers are checked by the calibration's stacks.
func funcIDLayoutOK(goexitPC uintptr) bool {
	at := func(pc uintptr) (uint8, bool) {
		f := runtime.FuncForPC(pc)
		if f == nil {
			return 0, false
		}
		g := runtime.FuncForPC(f.Entry())
		if g == nil || *(*uint32)(unsafe.Pointer(g)) == ^uint32(0) { // a funcinl, not a _func
			return 0, false
		}
		return funcID(g), true
	}
	ge, ok1 := at(goexitPC - 1)
	norm, ok2 := at(reflect.ValueOf(calNest).Pointer())
	return ok1 && ok2 && ge == 8 && norm == 0
}

const (
	walkOK = iota
	walkMiss
	walkFallback
)

// maxWalkFrames bounds the physical frames one walk visits; a deeper stack
// (or a skip reaching further) goes to runtime.Callers.
const maxWalkFrames = 1 << 14

// maxFrameSize bounds the distance between two consecutive frame pointers,
// a sanity check on the chain (the compiler moves variables larger than
// 10 MB to the heap; cmd/compile/internal/ir/cfg.go).
const maxFrameSize = 1 << 28

// walkFP walks the frame pointers of the calling goroutine. steps is the
// number of frames between getfp's result and the frame of Callers (or
// whichever function stands for it): fpHops, then walkFP's own frame and
// callersFP's. It fills pcs as runtime.Callers(skip+2, pcs) would from
// that frame and returns walkOK and the count, walkMiss and a PC whose
// verdict is unknown, or walkFallback.
//
// It must make no call that is not inlined after getfp: a call could grow
// and move the stack, leaving fp pointing into the old one.
//
//go:noinline
func walkFP(steps, skip int, pcs []uintptr) (n int, miss uintptr, status int) {
	fp := getfp()
	for ; steps > 0; steps-- {
		fp = *(*unsafe.Pointer)(fp)
	}
	const ptr = unsafe.Sizeof(uintptr(0))
	logical, lastK := 0, 0
	calleePanicky := false
	for range maxWalkFrames {
		// fp is the frame pointer of a frame known to be an ordinary Go
		// frame; the word above it is the return address into its caller.
		pc := *(*uintptr)(unsafe.Add(fp, ptr))
		v := lookupVerdict(pc)
		switch {
		case v == 0:
			return 0, pc, walkMiss
		case v&vUntrusted != 0:
			return 0, 0, walkFallback
		case v&vWrapper != 0:
			// Hidden by runtime.Callers unless it called a panic function
			// (elideWrapperCalling); that rare case is left to it.
			if calleePanicky {
				return 0, 0, walkFallback
			}
		default:
			k := int(v >> vCountLow)
			if skip > 0 {
				if skip < k {
					// runtime.Callers would start inside the frames
					// inlined at pc, which a return address cannot say.
					return 0, 0, walkFallback
				}
				skip -= k
				break
			}
			if logical+k > len(pcs) {
				// runtime.Callers would cut the stack inside them.
				return 0, 0, walkFallback
			}
			pcs[n] = pc
			n++
			logical += k
			lastK = k
			if logical == len(pcs) {
				// Full. runtime.CallersFrames expands inlined frames at a
				// PC only when another PC follows it, so the last one
				// must have none.
				if lastK != 1 {
					return 0, 0, walkFallback
				}
				return n, 0, walkOK
			}
		}
		calleePanicky = v&vPanicky != 0
		if v&vBottom != 0 {
			if n > 0 && lastK != 1 {
				return 0, 0, walkFallback
			}
			return n, 0, walkOK
		}
		// pc's verdict vouches for the frame it returns into: follow its
		// frame pointer. It must lie above this one (stacks grow down),
		// aligned; the chain ends at runtime.goexit, never at a nil
		// pointer, on a goroutine stack.
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next) <= uintptr(fp) || uintptr(next)&(ptr-1) != 0 || uintptr(next)-uintptr(fp) > maxFrameSize {
			return 0, 0, walkFallback
		}
		fp = next
	}
	return 0, 0, walkFallback
}

// maxFills bounds the verdicts one capture computes before it gives up
// and uses runtime.Callers; a stack that deep is seen again later with
// more of its verdicts cached.
const maxFills = 64

// callersFP is Callers's fast path; it must be called directly by Callers
// (or a function with the same frame shape), with Callers's skip. It
// reports false where runtime.Callers must be used instead.
//
//go:noinline
func callersFP(skip int, pcs []uintptr) (int, bool) {
	for range maxFills {
		// getfp's frame pointer, hops, then walkFP's frame, callersFP's,
		// and Callers's.
		n, miss, status := walkFP(fpHops+2, skip, pcs)
		switch status {
		case walkOK:
			return n, true
		case walkMiss:
			fillVerdict(miss)
		default:
			return 0, false
		}
	}
	return 0, false
}

// Callers' walk is checked once against runtime.Callers, on stacks with
// inlined frames, wrappers, a closure, generics and reflection, and
// truncated; any difference in the symbolized frames turns it off for good.
var (
	callersCalOnce sync.Once
	callersFPOK    bool
)

func callersFPEnabled() bool {
	if fpOff.Load() || fpBroken.Load() {
		return false
	}
	callersCalOnce.Do(func() {
		// On a goroutine of its own, whose stack is short and ends at
		// runtime.goexit, as the calibration expects: the first capture
		// may come from deeper than the calibration reads (256 frames),
		// or from above a frame the walk declines, and the walk would
		// then be off for good.
		done := make(chan struct{})
		go func() {
			defer close(done)
			calibrateCallers()
		}()
		<-done
	})
	return callersFPOK
}

func calibrateCallers() {
	calibrateOnce.Do(calibrate)
	if !fpUsable {
		return
	}
	var bottom [256]uintptr
	n := runtime.Callers(0, bottom[:])
	if n == 0 || n == len(bottom) || !funcIDLayoutOK(bottom[n-1]) {
		return
	}
	ok := true
	check := func() {
		for _, size := range []int{1, 3, 7, MaxDepth, 64} {
			for skip := range 4 {
				if !calibrationMatches(skip, size) {
					ok = false
				}
			}
		}
	}
	var c calibrator
	c.check = check
	mv := c.viaMethodValue
	calNest(3, func() { mv(2) })
	reflect.ValueOf(calNest).Call([]reflect.Value{reflect.ValueOf(2), reflect.ValueOf(func() { calGeneric(check, 1) })})
	callersFPOK = ok
}

type calibrator struct{ check func() }

//go:noinline
func (c *calibrator) viaMethodValue(depth int) {
	if depth > 0 {
		c.inlined(depth)
		return
	}
	c.check()
}

func (c *calibrator) inlined(depth int) { c.viaMethodValue(depth - 1) }

//go:noinline
func calNest(depth int, f func()) {
	if depth == 0 {
		f()
		return
	}
	calNest(depth-1, f)
}

//go:noinline
func calGeneric[T any](f func(), x T) {
	_ = x
	f()
}

// calibrationMatches compares the walk with runtime.Callers from the same
// frame, symbolized.
//
//go:noinline
func calibrationMatches(skip, size int) bool {
	return calibrationCompare(skip, make([]uintptr, size), make([]uintptr, size))
}

//go:noinline
func calibrationCompare(skip int, fast, slow []uintptr) bool {
	// One line, so that both name the same line of this function.
	var ok bool
	n, m := calibrationCallers(skip, fast, &ok), runtime.Callers(skip+1, slow)
	if !ok {
		return true // the walk declined; runtime.Callers would be used
	}
	return sameFrames(fast[:n], slow[:m])
}

// calibrationCallers stands for Callers, with the same frame shape.
//
//go:noinline
func calibrationCallers(skip int, pcs []uintptr, ok *bool) int {
	n, fast := callersFP(skip, pcs)
	*ok = fast
	return n
}

// sameFrames reports whether a and b symbolize to the same functions,
// files and lines.
func sameFrames(a, b []uintptr) bool {
	fa, fb := symbolize(a), symbolize(b)
	if len(fa) != len(fb) {
		return false
	}
	for i := range fa {
		if fa[i].Function != fb[i].Function || fa[i].File != fb[i].File || fa[i].Line != fb[i].Line {
			return false
		}
	}
	return true
}
