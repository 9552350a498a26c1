package finalizerwatch

import "github.com/gcprobe/probe/stackcapture"

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
// look-through set (stackcapture.LookThrough), the entry is marked, and
// from then on registrations through it are counted at their callers'
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
	if w.cfg.noWrappers || s.res == 0 || s.pc == 0 || s.stack == nil || s.own || s.wrapper.Load() || s.stack.Overflow() {
		return
	}
	want := callerAfter(s.stack.PCs(), s.pc)
	if want == 0 {
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
	stackcapture.LookThrough(f.Function)
	s.wrapper.Store(true)
	// The runtime build mode's fast path must not find the entry again.
	slot := &rtPCs[s.kind][rtPCSlot(s.pc)]
	if c := slot.Load(); c != nil && c.s == s {
		slot.CompareAndSwap(c, nil)
	}
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
