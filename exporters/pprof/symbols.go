package pprofexporter

import (
	"runtime"
	"sync"

	"github.com/gcprobe/probe/stackcapture"
)

// symbolCacheLimit bounds the program counters whose frames are cached:
// past it, a PC is symbolized on each profile. Return PCs are code
// addresses, so a program has a bounded number of them; the bound keeps a
// program with very many from growing the cache without end.
const symbolCacheLimit = 1 << 16

// symbolCache maps a return program counter to its frames, inlined calls
// expanded, innermost first. It is shared by every profile of the process
// (program counters mean the same in every watcher), so that a profile
// symbolizes only what no earlier profile did, and the ledger's stacks
// never keep frames of their own.
type symbolCache struct {
	mu sync.Mutex
	m  map[uintptr][]stackcapture.Frame
}

var symbols = symbolCache{m: make(map[uintptr][]stackcapture.Frame)}

// frames appends to dst the frames that the return PC pc stands for in a
// stack where next is the PC after it (0 if none).
//
// Stacks come in two forms: from a frame-pointer walk, one physical return
// PC per frame, which stands for its whole chain of inlined calls; from
// runtime.Callers, one PC per logical frame, where the calls an inlined PC
// sits in follow it as virtual PCs. runtime.CallersFrames tells the two
// apart by the PC that follows (and does not expand the last PC of its
// list at all), so a PC is symbolized here on its own with a 0 after it,
// expanded whole, and the expansion cut back to its innermost frame when
// next is the virtual PC of its caller: each expanded frame's PC is that
// virtual PC less one.
func (c *symbolCache) frames(pc, next uintptr, dst []stackcapture.Frame) []stackcapture.Frame {
	c.mu.Lock()
	fs, ok := c.m[pc]
	c.mu.Unlock()
	if !ok {
		it := runtime.CallersFrames([]uintptr{pc, 0})
		for {
			f, more := it.Next()
			if f.PC != 0 || f.Function != "" {
				fs = append(fs, stackcapture.Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
			}
			if !more {
				break
			}
		}
		c.mu.Lock()
		if len(c.m) < symbolCacheLimit {
			c.m[pc] = fs
		}
		c.mu.Unlock()
	}
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
