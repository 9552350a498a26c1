package stackcapture

import (
	"slices"
	"sync"
)

// pcFramesLimit bounds the return PCs whose frames PCFrames caches: past
// it, a PC is symbolized on each call. Return PCs are code addresses, so a
// program has a bounded number of them; the bound keeps a program with
// very many from growing the cache without end.
const pcFramesLimit = 1 << 16

// frameChunkLen is how many frames a chunk of the cache's store holds.
// Chunks are never moved or freed, so a slice or a pointer into one stays
// valid: a site can keep a pointer to its frame instead of a copy. No
// entry is longer than a chunk, so a count fits the map word's 16 bits
// (the array below does not compile otherwise).
const frameChunkLen = 256

var _ [1<<16 - 1 - frameChunkLen]struct{}

// pcFrameCache maps a return PC to its frames, kept in chunks: an entry is
// a map word (where its frames start in the store, and how many) and the
// frames themselves, without the slice header and the allocation per PC a
// map of slices would take (at 10 000 PCs, 1.1 MB became 0.75).
type pcFrameCache struct {
	mu     sync.Mutex
	m      map[uintptr]uint64 // start<<16 | count; start indexes the store
	chunks []*[frameChunkLen]Frame
	used   int // frames used in the last chunk
}

var pcFrames = pcFrameCache{m: make(map[uintptr]uint64)}

// PCFrames returns the frames the return PC pc stands for, innermost
// first, its inlined calls expanded: those runtime.CallersFrames gives for
// pc followed by nothing (a PC followed by 0, since CallersFrames does not
// expand the last PC of its list). The frames are cached for the process
// and shared by every caller, up to a bound: the slice must not be
// modified.
//
// A PC that runtime.Callers returned may stand for its innermost frame
// only, the calls it is inlined into following it in the stack as virtual
// PCs. A caller symbolizing such a stack PC by PC keeps only the first
// frame of the expansion where the next PC of the stack is the second
// frame's PC plus one: each expanded frame's PC is its virtual PC less one.
func PCFrames(pc uintptr) []Frame {
	c := &pcFrames
	c.mu.Lock()
	v, ok := c.m[pc]
	var fs []Frame
	if ok {
		fs = c.slice(v)
	}
	c.mu.Unlock()
	if ok {
		return fs
	}
	// The 0 after pc makes CallersFrames expand pc; it yields no frame of
	// its own, or an empty one.
	fs = slices.DeleteFunc(symbolize([]uintptr{pc, 0}), func(f Frame) bool { return f.PC == 0 && f.Function == "" })
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[pc]; ok { // a racing call cached it first
		return c.slice(v)
	}
	if len(c.m) >= pcFramesLimit || len(fs) > frameChunkLen {
		return fs
	}
	if len(c.chunks) == 0 || c.used+len(fs) > frameChunkLen {
		c.chunks = append(c.chunks, new([frameChunkLen]Frame))
		c.used = 0
	}
	start := (len(c.chunks)-1)*frameChunkLen + c.used
	copy(c.chunks[len(c.chunks)-1][c.used:], fs)
	c.used += len(fs)
	v = uint64(start)<<16 | uint64(len(fs))
	c.m[pc] = v
	return c.slice(v)
}

// slice returns the frames of the map word v. Under mu.
func (c *pcFrameCache) slice(v uint64) []Frame {
	start, n := int(v>>16), int(v&(1<<16-1))
	ch, off := c.chunks[start/frameChunkLen], start%frameChunkLen
	return ch[off : off+n : off+n]
}
