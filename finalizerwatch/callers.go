package finalizerwatch

import (
	"runtime"
	"slices"

	"github.com/gcprobe/probe/stackcapture"
)

// Wrappers found by the ledger.
//
// A helper that only forwards to the registering call (a filesystem's
// one-line Open, a user's openConfig) is the site of what all its callers
// register, and the line a user must change is a caller's. The ledger
// tells a helper from a site by its callers, for what the standard
// library registers on the helper's behalf (a file, a connection: an
// entry with a Resource, in the runtime build mode). A function that sets
// a finalizer or cleanup on a type of its own is that type's site, however
// many lines call it: a table of handlers called through one line would
// otherwise all be counted at that line. On an entry's first
// registration in each of its cycles (once per entry and cycle, where the
// ring is folded anyway), the frame above the site is compared with the
// one above it in the entry's first stack. Two different lines, both the
// user's (a line of net/http's that calls a handler is no caller to move
// to), make the site's function a wrapper: it joins the process's
// look-through set (stackcapture.LookThrough), and from then on registrations through it are counted at their callers'
// lines, with the helper kept in their stacks. What the entry counted
// before stays with it. A helper inlined into its callers has an entry per
// caller already, each named by the helper's line: only the option
// (stackcapture.SetLookThrough, probe.WithLookThrough) names their
// callers.

// checkCaller compares the caller of the registration being made at s
// with the caller in s's first stack, and marks s's function a wrapper if
// they are two lines of the user's. It walks at most 32 frames.
//
//go:noinline
func (w *Watcher) checkCaller(s *site) {
	if w.cfg.noWrappers || s.res == 0 || s.pc == 0 || s.stack == nil || s.own || s.stack.Overflow() {
		return
	}
	first := s.stack.PCs()
	want := callerAfter(first, s.pc)
	if want == 0 {
		return
	}
	// Only a function that calls the standard library itself: one that
	// opens through a helper already looked through is the caller the
	// helper's files belong to, however many lines call it.
	if i := slices.Index(first, s.pc); i > 0 && stackcapture.LookedThrough(first[i-1]) {
		return
	}
	var pcs [32]uintptr // the hooks', the standard library's frames, the site and its caller
	n := stackcapture.Callers(0, pcs[:])
	got := callerAfter(pcs[:n], s.pc)
	if got == 0 || got == want {
		return
	}
	if stackcapture.OriginOf(got) != stackcapture.OriginUser || stackcapture.OriginOf(want) != stackcapture.OriginUser {
		return
	}
	a, b := stackcapture.SiteOfPC(want), stackcapture.SiteOfPC(got)
	if a.File == b.File && a.Line == b.Line {
		return
	}
	f := s.siteFrame()
	if f.Function == "" {
		return
	}
	// Registrations through the helper now find their caller's frame
	// first (stackcapture.OriginOf skips the helper's), and so another
	// entry: this one is no longer reached, and keeps what it counted.
	stackcapture.LookThrough(f.Function)
}

// callerAfter returns the PC after pc in pcs: the return PC into the
// caller of pc's function, or 0 if pc is not there or is last.
func callerAfter(pcs []uintptr, pc uintptr) uintptr {
	for i, p := range pcs {
		if p == pc {
			if i+1 < len(pcs) {
				return pcs[i+1]
			}
			return 0
		}
	}
	return 0
}

// lookThroughOneLiner reports whether the frame of the program's at
// stack[at], about to be a new site of what the standard library
// registered, is a one-line forwarder, and if so adds its function to the
// look-through set. A one-line forwarder is a function whose registering
// call is on the line it is declared on, not inlined into its caller:
// func (OsFS) Open(name string) (fs.File, error) { return os.Open(name) }.
// Such a function is written to hand what it opens to its caller: the
// line to change is the caller's, though there be only one, and a frame
// of the program's must be above it. It runs once per new site.
func (w *Watcher) lookThroughOneLiner(stack []uintptr, at int) bool {
	if w.cfg.noWrappers || at+1 >= len(stack) {
		return false
	}
	pc := stack[at]
	fs := stackcapture.PCFrames(pc)
	if len(fs) == 0 {
		return false
	}
	f := fs[len(fs)-1] // the physical function: a frame inlined into another has no entry of its own
	if stackcapture.OriginOf(pc) != stackcapture.OriginUser {
		return false
	}
	if sf := stackcapture.SiteFrameOfPC(pc); sf == nil || sf.Function != f.Function || sf.Line != f.Line {
		return false // the program's frame at pc is inlined into another
	}
	// FuncForPC of a PC in an inlined call describes the inlined
	// function, with the entry of the one it is inlined into: the
	// physical function is the one at that entry.
	fn := runtime.FuncForPC(pc - 1)
	if fn == nil {
		return false
	}
	phys := runtime.FuncForPC(fn.Entry())
	if phys == nil || phys.Name() != f.Function {
		return false
	}
	if _, declLine := phys.FileLine(phys.Entry()); declLine != f.Line {
		return false
	}
	caller := false
	for _, p := range stack[at+1:] {
		if stackcapture.OriginOf(p) == stackcapture.OriginUser {
			caller = true
			break
		}
	}
	if !caller {
		return false
	}
	return stackcapture.LookThrough(f.Function) || stackcapture.LookedThrough(pc)
}
