package stackcapture

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MaxDepth is the most frames a captured stack keeps.
const MaxDepth = 32

// Frame-pointer walking is calibrated once against runtime.Callers: the
// number of frames between getfp's result and CallerPC's own frame depends
// on whether the compiler calls the assembly through an ABI wrapper, and a
// mismatch of any kind turns the fast path off for good.
var (
	calibrateOnce sync.Once
	fpHops        int  // frames to step over before CallerPC's own frame
	fpUsable      bool // the walk agreed with runtime.Callers

	fpOff    atomic.Bool // SetFramePointerWalk(false)
	fpBroken atomic.Bool // CallersChecked found the walk wrong: off for good
)

// SetFramePointerWalk turns frame-pointer unwinding in CallerPC and
// Callers on or off for the whole process and returns the previous
// setting. It is on by default; off, both use runtime.Callers (whose
// unwinder reads the binary's unwind tables), the reference their results
// are checked against. It cannot turn the walk on where calibration found
// it unusable, or where CallersChecked found it wrong: FramePointerWalk
// reports whether it is in use.
func SetFramePointerWalk(on bool) (was bool) {
	return !fpOff.Swap(!on)
}

// FramePointerWalk reports whether Callers walks frame pointers: the
// architecture has them, calibration against runtime.Callers succeeded,
// CallersChecked has found no stack where the two differ, and
// SetFramePointerWalk has not turned the walk off.
func FramePointerWalk() bool { return callersFPEnabled() }

func calibrate() {
	if !haveFramePointers {
		return
	}
	for hops := 0; hops < 4; hops++ {
		fast, slow := calibrateOuter(hops)
		if fast != 0 && fast == slow {
			fpHops, fpUsable = hops, true
			return
		}
	}
}

//go:noinline
func calibrateOuter(hops int) (fast, slow uintptr) {
	return calibrateInner(hops)
}

// calibrateInner compares the return address into calibrateOuter found by
// walking hops+1 frame pointers with the one runtime.Callers reports.
//
//go:noinline
func calibrateInner(hops int) (fast, slow uintptr) {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:]) // 0 Callers, 1 calibrateInner, 2 calibrateOuter
	return fpWalk(hops, 1), pcs[0]
}

// fpWalk returns the return address skip frames above the function that
// called fpWalk, stepping over hops extra frames first. It makes no calls
// after getfp, so the goroutine's stack cannot move under it.
//
//go:noinline
func fpWalk(hops, skip int) uintptr {
	fp := getfp()
	for n := hops + skip; n > 0 && fp != nil; n-- {
		fp = *(*unsafe.Pointer)(fp)
	}
	if fp == nil {
		return 0
	}
	// The return address sits one word above the saved frame pointer.
	return *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
}

// CallerPC returns the return program counter of the call made by the
// frame skip levels up, where skip 0 is the function calling CallerPC:
// CallerPC(0) is a PC inside that function, at its call of CallerPC.
// Frames are physical here: a wrapper the compiler generates (for a go
// statement or a method value) counts as a frame, where runtime.Callers
// would hide it. The finalizerwatch entry points call CallerPC(1) from
// noinline functions called directly by user code, so that never matters
// there.
//
// The result can be interned like any captured stack (a stack of depth one)
// and symbolizes to the calling line, inlined functions expanded.
//
// Where frame pointers can be trusted (amd64 and arm64, checked once
// against runtime.Callers, and not turned off by SetFramePointerWalk) it
// costs a few nanoseconds; elsewhere it falls
// back to runtime.Callers. It returns 0 if the stack is shallower than skip.
//
//go:noinline
func CallerPC(skip int) uintptr {
	if skip < 0 {
		panic("stackcapture.CallerPC: negative skip")
	}
	calibrateOnce.Do(calibrate)
	if fpUsable && !fpOff.Load() {
		// +1 steps from CallerPC's frame to its caller's.
		return fpWalk(fpHops, skip+1)
	}
	var pcs [1]uintptr
	// 0 runtime.Callers, 1 CallerPC, 2 CallerPC's caller.
	if runtime.Callers(skip+2, pcs[:]) == 0 {
		return 0
	}
	return pcs[0]
}

// Callers fills pcs with the return program counters of the calling
// goroutine's stack, starting skip levels up, and returns how many it
// wrote. Frames are counted as runtime.Callers counts them: skip 0 is the
// function calling Callers, inlined calls count as frames and the wrappers
// runtime.Callers hides (method values, go and defer statements, method
// wrappers) are hidden here too.
//
// The result is equivalent to runtime.Callers(skip+1, pcs) called at the
// same place: runtime.CallersFrames expands both into the same frames
// (function, file and line), down to runtime.goexit at the bottom of the
// goroutine, and a stack deeper than len(pcs) is cut after the same frame.
// The PCs themselves may differ: where frame pointers can be trusted (see
// SetFramePointerWalk) the result holds one return address per physical
// frame, which runtime.CallersFrames expands into the frames inlined at
// that call, where runtime.Callers writes one PC per logical frame.
// Consumers must symbolize through runtime.CallersFrames (as Table does),
// not count PCs.
//
// The frame-pointer walk costs a few nanoseconds per frame; whenever it
// cannot vouch for a frame (a cgo callback, a signal-injected call, a
// system stack switch, anything outside Go text) or its result could not
// be written equivalently, Callers uses runtime.Callers instead.
//
//go:noinline
func Callers(skip int, pcs []uintptr) int {
	if skip < 0 {
		panic("stackcapture.Callers: negative skip")
	}
	if len(pcs) == 0 {
		return 0
	}
	if callersFPEnabled() {
		if n, ok := callersFP(skip, pcs); ok {
			return n
		}
	}
	// 0 runtime.Callers, 1 Callers, 2 Callers's caller.
	return runtime.Callers(skip+2, pcs)
}

// CallersChecked is Callers for a stack the caller has not seen before
// (a new entry in a table of stacks): it also captures with
// runtime.Callers, from the same frame, and compares the two symbolized.
// If they differ, the walk has met a frame it misreads: CallersChecked
// turns the whole-stack walk off for the process (Callers uses
// runtime.Callers from then on and FramePointerWalk reports false;
// CallerPC's walk of one frame is not affected), and returns
// runtime.Callers's result. So a walk bug costs speed, never a wrong
// stack kept for good. It costs a runtime.Callers and the symbolization
// of both stacks: for new stacks only, not for every capture.
//
// Once the walk is off, a stack captured again has runtime.Callers's PCs
// (one per logical frame) where it had the walk's (one per physical
// frame): a table keyed by PCs then holds it twice, as two stacks that
// symbolize alike.
//
//go:noinline
func CallersChecked(skip int, pcs []uintptr) int {
	if skip < 0 {
		panic("stackcapture.CallersChecked: negative skip")
	}
	if len(pcs) == 0 {
		return 0
	}
	if !callersFPEnabled() {
		return runtime.Callers(skip+2, pcs)
	}
	var buf [MaxDepth]uintptr
	ref := buf[:]
	if len(pcs) > len(buf) {
		ref = make([]uintptr, len(pcs))
	}
	// Both count from CallersChecked's caller, at the call.
	n, ok := callersFP(skip, pcs)
	m := runtime.Callers(skip+2, ref[:len(pcs)])
	// Compared on copies: symbolizing keeps its slices, which would
	// make pcs escape, and the caller's buffer with it, on every call.
	if ok && sameFrames(slices.Clone(pcs[:n]), slices.Clone(ref[:m])) {
		return n
	}
	if ok {
		fpBroken.Store(true)
	}
	return copy(pcs, ref[:m])
}
