package pprofexporter

import (
	"github.com/gcprobe/probe/stackcapture"
)

// retFrames appends to dst the frames that the return PC pc stands for in a
// stack where next is the PC after it (0 if none).
//
// Stacks come in two forms: from a frame-pointer walk, one physical return
// PC per frame, which stands for its whole chain of inlined calls; from
// runtime.Callers, one PC per logical frame, where the calls an inlined PC
// sits in follow it as virtual PCs. runtime.CallersFrames tells the two
// apart by the PC that follows (and does not expand the last PC of its
// list at all), so a PC is symbolized on its own, expanded whole
// (stackcapture.PCFrames), and the expansion cut back to its innermost
// frame when next is the virtual PC of its caller: each expanded frame's
// PC is that virtual PC less one.
//
// PCFrames caches the frames for the process: they are shared by every
// profile (program counters mean the same in every watcher) and by the
// ledger's site frames, so that a profile symbolizes only what nothing
// symbolized before, and the ledger's stacks keep no frames of their own.
func retFrames(pc, next uintptr, dst []stackcapture.Frame) []stackcapture.Frame {
	fs := stackcapture.PCFrames(pc)
	if calledFrom(fs) == next {
		fs = fs[:1]
	}
	return append(dst, fs...)
}

// calledFrom returns the virtual PC that follows a PC whose expansion is
// fs in a runtime.Callers stack where the PC stands for its innermost
// frame only (its callers follow as virtual PCs: each expanded frame's PC
// is that virtual PC less one); 0 when fs is a single frame, which never
// needs cutting.
func calledFrom(fs []stackcapture.Frame) uintptr {
	if len(fs) < 2 {
		return 0
	}
	return fs[1].PC + 1
}
