// Package stackcapture captures call stacks cheaply, interns them in a
// bounded table and symbolizes them lazily.
//
// A registration hot path needs two things from the stack: the call site
// (one program counter) on every call, and now and then the whole stack.
// CallerPC returns the first by walking one or two frame pointers, which
// costs a few nanoseconds where runtime.Callers costs about a hundred;
// Callers returns the second. Table interns captured stacks by hash, so a
// stack seen a million times is stored once (its PCs, in a slice of their
// own length), and refuses new stacks past its limit, folding them into one
// overflow stack that it counts. Symbolization (runtime.CallersFrames)
// runs when a report asks for it: a stack's site once, then cached; its
// full frames on each request, so that the table holds no frames.
// PCFrames symbolizes one return PC and caches its frames for the process,
// for callers that symbolize many stacks sharing PCs, as profiles do.
//
//	var pcs [stackcapture.MaxDepth]uintptr
//	n := stackcapture.Callers(0, pcs[:])
//	s := table.Intern(pcs[:n])
//	fmt.Println(s.Site()) // main.handle /src/app/main.go:42
//
// Callers walks frame pointers, as the runtime's execution tracer does,
// and falls back to runtime.Callers wherever it cannot vouch for a frame
// (cgo callbacks, signal frames, stack switches). A caller that keeps
// stacks captures a new one with CallersChecked, which also runs
// runtime.Callers and compares: a difference turns the walk off for the
// process, so that a frame the walk misreads costs speed, never a wrong
// stack.
//
// # Skip
//
// Every function that takes a skip counts it the same way: skip 0 is the
// function that called CallerPC or Callers, skip 1 is its caller, and so
// on. Frames are counted as the runtime.Callers documentation does, except
// that a function inlined into its caller shares the caller's frame; the
// functions of this module that sit on a capture path are marked noinline
// so that their skip counts are exact.
//
// # Sites
//
// A stack's site is its first frame outside the Go runtime and outside
// gcprobe's own library code (tests and examples of this module count as
// user code). It is reported as "function file:line".
//
// All exported functions and methods are safe for concurrent use.
package stackcapture
