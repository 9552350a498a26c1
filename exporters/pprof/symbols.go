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

// frames appends the frames of the return PC pc to dst.
func (c *symbolCache) frames(pc uintptr, dst []stackcapture.Frame) []stackcapture.Frame {
	c.mu.Lock()
	fs, ok := c.m[pc]
	c.mu.Unlock()
	if ok {
		return append(dst, fs...)
	}
	start := len(dst)
	it := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := it.Next()
		dst = append(dst, stackcapture.Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
		if !more {
			break
		}
	}
	c.mu.Lock()
	if len(c.m) < symbolCacheLimit {
		c.m[pc] = append([]stackcapture.Frame(nil), dst[start:]...)
	}
	c.mu.Unlock()
	return dst
}
