package stackcapture

import (
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"
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

// MaxLabelLen bounds the length in bytes of Frame.Label.
const MaxLabelLen = 256

// Label is String made safe for a metric label or a span attribute: valid
// UTF-8 (invalid bytes become U+FFFD) and at most MaxLabelLen bytes,
// whatever the names (generic instantiations, closures, cgo, very long
// paths). A long function name keeps its head and tail around an ellipsis;
// a long file name keeps its tail, the part that tells files apart.
func (f Frame) Label() string {
	s := f.String()
	if len(s) <= MaxLabelLen && utf8.ValidString(s) {
		return s
	}
	fn := strings.ToValidUTF8(f.Function, "\uFFFD")
	file := strings.ToValidUTF8(f.File, "\uFFFD")
	line := ":" + strconv.Itoa(f.Line)
	const fnMax, ellipsis = 120, "…"
	if len(fn) > fnMax {
		half := (fnMax - len(ellipsis)) / 2
		fn = cutUTF8(fn[:half]) + ellipsis + cutUTF8Front(fn[len(fn)-half:])
	}
	if room := MaxLabelLen - len(fn) - 1 - len(line); len(file) > room {
		file = ellipsis + cutUTF8Front(file[len(file)-(room-len(ellipsis)):])
	}
	return fn + " " + file + line
}

// cutUTF8 drops a rune cut in two at the end of s.
func cutUTF8(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// cutUTF8Front drops a rune cut in two at the start of s.
func cutUTF8Front(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[1:]
	}
	return s
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
