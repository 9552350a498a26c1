package stackcapture

import (
	"runtime"
	"strconv"
	"strings"
)

// Frame is one symbolized frame of a stack.
type Frame struct {
	Function string // package path-qualified function name
	File     string // absolute file name, as the binary records it
	Line     int
	PC       uintptr // the program counter the frame was symbolized from
}

// String formats f as "function file:line", the form gcprobe uses for a
// site everywhere.
func (f Frame) String() string {
	if f.Function == "" && f.File == "" {
		return "unknown"
	}
	return f.Function + " " + f.File + ":" + strconv.Itoa(f.Line)
}

// modulePrefix marks gcprobe's own functions.
const modulePrefix = "github.com/gcprobe/probe/"

// isInternal reports whether f belongs to the Go runtime or to gcprobe's
// library code, the frames a site skips. Tests and examples of this module
// are user code: they are where test leaks are planted.
func isInternal(f Frame) bool {
	if strings.HasPrefix(f.Function, "runtime.") || strings.HasPrefix(f.Function, "weak.") {
		return true
	}
	if !strings.HasPrefix(f.Function, modulePrefix) {
		return false
	}
	if strings.HasSuffix(f.File, "_test.go") {
		return false
	}
	rest := f.Function[len(modulePrefix):]
	return !strings.HasPrefix(rest, "examples/") && !strings.HasPrefix(rest, "bench")
}

// symbolize expands pcs into frames, inlined calls included.
func symbolize(pcs []uintptr) []Frame {
	if len(pcs) == 0 {
		return nil
	}
	frames := make([]Frame, 0, len(pcs))
	it := runtime.CallersFrames(pcs)
	for {
		f, more := it.Next()
		frames = append(frames, Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
		if !more {
			break
		}
	}
	return frames
}

// siteOf returns the first frame of frames outside the runtime and gcprobe,
// or the last frame if all are internal.
func siteOf(frames []Frame) Frame {
	for _, f := range frames {
		if !isInternal(f) {
			return f
		}
	}
	if len(frames) == 0 {
		return Frame{}
	}
	return frames[len(frames)-1]
}

// SiteOfPC symbolizes a single return PC, such as CallerPC returns, to the
// innermost function at that call, inlining expanded.
func SiteOfPC(pc uintptr) Frame {
	return siteOf(symbolize([]uintptr{pc}))
}
