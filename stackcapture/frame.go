package stackcapture

import (
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gcprobe/probe/internal/symname"
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
		fn = symname.CutUTF8(fn[:half]) + ellipsis + symname.CutUTF8Front(fn[len(fn)-half:])
	}
	if room := MaxLabelLen - len(fn) - 1 - len(line); len(file) > room {
		file = ellipsis + symname.CutUTF8Front(file[len(file)-(room-len(ellipsis)):])
	}
	return fn + " " + file + line
}

// modulePath is gcprobe's module path; modulePrefix begins the names of
// the functions of its packages below the root.
const (
	modulePath   = "github.com/gcprobe/probe"
	modulePrefix = modulePath + "/"
)

// isInternal reports whether f belongs to the Go runtime, to reflection,
// to the standard library, to a wrapper the compiler generated (a method
// value's "-fm", for one), or to gcprobe's library code: the frames a site
// skips, so that a registration made through a method value,
// reflect.Value.Call or a standard-library function (os.Open, in the
// runtime build mode) is still counted at the user's line. Tests and
// examples of this module are user code: they are where test leaks are
// planted. See classOf.
func isInternal(f Frame) bool { return classOf(f) != classUser }

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

// siteOfPCs is siteOf(symbolize(pcs)) without keeping the frames: it
// symbolizes only as far as the site.
func siteOfPCs(pcs []uintptr) Frame {
	if len(pcs) == 0 {
		return Frame{}
	}
	it := runtime.CallersFrames(pcs)
	for {
		rf, more := it.Next()
		f := Frame{Function: rf.Function, File: rf.File, Line: rf.Line, PC: rf.PC}
		if !more || !isInternal(f) {
			return f
		}
	}
}

// Indirect reports whether no frame at the return PC pc (inlined calls
// expanded) is the user's first: every one is the runtime's, reflection's,
// the standard library's, a compiler-generated wrapper's, or gcprobe's
// itself (OriginOf is not OriginUser). CallerPC(1) in a function the user
// called through a method value or reflection returns such a PC; the
// user's line is further up the stack. The first answer for a PC
// symbolizes it; later ones are a table lookup.
func Indirect(pc uintptr) bool { return OriginOf(pc) != OriginUser }

// SiteOfPC symbolizes a single return PC, such as CallerPC returns, to the
// innermost function at that call, inlining expanded.
func SiteOfPC(pc uintptr) Frame {
	return siteOfPCs([]uintptr{pc})
}
