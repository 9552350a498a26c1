package finalizerwatch

import (
	"strings"
	"sync/atomic"

	"github.com/gcprobe/probe/stackcapture"
)

// Origins: which line of the program caused a goroutine.
//
// In the runtime build mode every go statement asks rtGoOrigin for the new
// goroutine's origin, which the runtime keeps in the goroutine's record
// (g.gcprobeOrigin, set in newproc before the goroutine is queued;
// proc.go). A registration whose own stack has no frame of the program's
// (one made on net/http's dial goroutine, on a resolver's goroutine) is
// then counted at its goroutine's origin (rtIndirectSite): the user's
// client.Get line rather than net/http's transport.go.
//
// The origin of a goroutine is
//   - for a go statement in the program's code (or gcprobe's), the go
//     statement itself;
//   - for a go statement in the standard library, the first frame above
//     it, on the creating goroutine's stack, that is the program's (or
//     gcprobe's, whose registrations are its own and not counted), found
//     by a frame-pointer walk; where there is none, the creating
//     goroutine's own origin: transitively, net/http's dial goroutine
//     started by a connection's goroutine that net/http started still
//     leads to the user's line;
//   - for a go statement in package runtime, none (0).
//
// An origin is a return PC with a tag in bits originTagShift and up: what
// the go statement that made the goroutine started (originHTTPClient: a
// goroutine of net/http's Transport), which names the purpose of the
// connections it registers. The tag is the goroutine's own, never
// inherited: a resolver goroutine started by the dial goroutine leads to
// the same line, and its sockets are not HTTP connections.
//
// A go statement in the program's code costs the hook a table load: the
// class of each go statement's PC is cached (rtGoPCs). Only a standard
// library's go statement walks its goroutine's stack. The hook starts no
// goroutine, does not block on the fast path, and recovers from any
// panic (the go statement then gets no origin); a go statement reached
// from inside it gets none (the runtime's side guards that).

const (
	originTagShift         = 56
	originPCMask   uintptr = 1<<originTagShift - 1
	originTagMask  uintptr = 0x7f // bit 63 is the runtime's (gcprobeOriginBusy)
)

// Origin tags.
const (
	originTagNone       = iota
	originTagHTTPClient // started by net/http's Transport (its dial, its connections' loops)
)

// goClass is the cached class of a go statement's return PC.
type goClass uint8

const (
	goUnknown       goClass = iota
	goProgram               // the program's or gcprobe's: the go statement is the origin
	goRuntime               // package runtime's: no origin
	goStd                   // the standard library's: walk
	goStdHTTPClient         // net/http's Transport's: walk, and tag originTagHTTPClient
)

// rtGoPCs caches the classes of go statements' return PCs, direct-mapped
// (rtPCSlot), each slot a PC shifted left by goClassBits and its class:
// one atomic load and a compare for a go statement seen before. Two PCs
// that map to one slot take turns in it.
var rtGoPCs [1 << rtPCBits]atomic.Uint64

const goClassBits = 4

// rtGoOrigin is the go statement's hook: the origin of a goroutine created
// at return PC pc by a goroutine whose origin is parent.
func rtGoOrigin(pc, parent uintptr) uintptr {
	v := rtGoPCs[rtPCSlot(pc)].Load()
	if v>>goClassBits != uint64(pc) || v == 0 {
		return rtGoOriginNew(pc, parent)
	}
	return originOfClass(goClass(v&(1<<goClassBits-1)), pc, parent)
}

// rtGoOriginNew classifies a go statement's PC seen for the first time
// (or pushed out of its slot), caches its class, and returns the origin.
//
//go:noinline
func rtGoOriginNew(pc, parent uintptr) (origin uintptr) {
	defer func() {
		if recover() != nil {
			origin = 0
		}
	}()
	c := goClassOf(pc)
	if uint64(pc) < 1<<(64-goClassBits) {
		rtGoPCs[rtPCSlot(pc)].Store(uint64(pc)<<goClassBits | uint64(c))
	}
	return originOfClass(c, pc, parent)
}

// originOfClass returns the origin of a goroutine created by a go
// statement of class c at return PC pc, by a goroutine of origin parent.
func originOfClass(c goClass, pc, parent uintptr) uintptr {
	switch c {
	case goProgram:
		return pc
	case goRuntime:
		return 0
	case goStdHTTPClient:
		return rtGoOriginStd(pc, parent, originTagHTTPClient)
	}
	return rtGoOriginStd(pc, parent, originTagNone)
}

// goClassOf classifies the go statement at return PC pc. The runtime's
// own are told apart first, by the runtime (rtInRuntime), which does not
// allocate: the collector's workers are started by gcStart holding its
// semaphores, where an allocation (symbolizing the PC does allocate)
// could start a cycle that waits for them.
func goClassOf(pc uintptr) goClass {
	if rtInRuntime(pc) {
		return goRuntime
	}
	if stackcapture.OriginOf(pc) != stackcapture.OriginSkip {
		return goProgram
	}
	for _, f := range stackcapture.PCFrames(pc) {
		// go1.26: transport.go's startDialConnForLocked (the dial
		// goroutine), dialConn (the connection's readLoop and
		// writeLoop), and the rest of the Transport's.
		if strings.HasPrefix(f.Function, "net/http.(*Transport).") || strings.HasPrefix(f.Function, "net/http.(*persistConn).") {
			return goStdHTTPClient
		}
	}
	return goStd
}

// rtOriginWalk is how many frames the walk for a standard library's go
// statement reads: net/http's dial goroutine is started about a dozen
// frames below the user's client.Get, under the hook's own few.
const rtOriginWalk = 64

// rtGoOriginStd returns the origin of a goroutine that the standard
// library's go statement at pc starts, tagged tag: the first frame above
// pc on this (the creating) goroutine's stack that is not the standard
// library's, else parent's return PC. A frame of gcprobe's is an origin
// too: what such a goroutine registers is gcprobe's own.
//
//go:noinline
func rtGoOriginStd(pc, parent uintptr, tag uintptr) (origin uintptr) {
	defer func() {
		if recover() != nil {
			origin = 0
		}
	}()
	var pcs [rtOriginWalk]uintptr
	n := stackcapture.Callers(0, pcs[:])
	origin = parent & originPCMask
	for _, p := range fromPC(pcs[:n], pc) {
		if stackcapture.OriginOf(p) != stackcapture.OriginSkip {
			origin = p
			break
		}
	}
	return origin | tag<<originTagShift
}

// goroutineOrigin returns the calling goroutine's origin: the return PC
// of the line that caused it (0 if none is known) and its tag.
func goroutineOrigin() (pc uintptr, tag uint8) {
	o := rtGoroutineOrigin()
	return o & originPCMask, uint8(o >> originTagShift & originTagMask)
}
