package heapprofile

import (
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gcprobe/probe/stackcapture"
)

// RuntimeSite is the function of the one site shared by the stacks that
// have no frame outside the Go runtime (the runtime's own goroutines
// allocating, such as the GC's workers): a site is never a runtime
// file:line, which would name no line anyone can change.
const RuntimeSite = "runtime (no caller outside the runtime)"

// runtimeSiteFrame is RuntimeSite's frame: no file, no line.
var runtimeSiteFrame = stackcapture.Frame{Function: RuntimeSite}

// pkgPath returns the package path of a fully qualified function name, as
// stackcapture's classification reads it: "net/http.(*conn).serve" is in
// "net/http", "pkg.F[go.shape.*example.com/x.T]" in "pkg" (type arguments
// may hold slashes and dots of other packages, so they are cut first).
func pkgPath(function string) string {
	if i := strings.IndexByte(function, '['); i >= 0 {
		function = function[:i]
	}
	slash := strings.LastIndexByte(function, '/')
	if i := strings.IndexByte(function[slash+1:], '.'); i >= 0 {
		return function[:slash+1+i]
	}
	return function
}

// isRuntime reports whether f is the Go runtime's: a function of package
// runtime, runtime/internal/... or internal/runtime/..., or one the
// runtime implements under another package's name by go:linkname
// (reflect.unsafe_New, internal/bytealg.MakeNoZero), which the file tells:
// it is in the runtime's source folder ($GOROOT/src/runtime, or "runtime"
// under -trimpath). runtime/pprof, runtime/debug and the like are
// standard-library packages of their own, not the runtime.
func isRuntime(f stackcapture.Frame) bool {
	pkg := pkgPath(f.Function)
	if pkg == "runtime" || strings.HasPrefix(pkg, "runtime/internal/") || strings.HasPrefix(pkg, "internal/runtime/") {
		return true
	}
	if f.File == "" || strings.Contains(pkg, ".") || pkg == "main" {
		return false // a module's package has a dot in its path; main is the user's
	}
	dir := filepath.ToSlash(filepath.Dir(f.File))
	return dir == "runtime" || strings.HasSuffix(dir, "/src/runtime")
}

// isStdInternal reports whether pkg is one of the standard library's
// internal or vendored packages (internal/sync, net/http/internal,
// vendor/golang.org/x/net/...): code no one outside the standard library
// calls, which a site skips for the public function that called it.
func isStdInternal(pkg string) bool {
	root, _, _ := strings.Cut(pkg, "/")
	if strings.Contains(root, ".") || pkg == "main" {
		return false
	}
	return root == "internal" || root == "vendor" || strings.Contains(pkg, "/internal/") || strings.HasSuffix(pkg, "/internal")
}

// findSite returns the site of a stack (return PCs, innermost first) and
// the index of its PC in stk; at is -1 for RuntimeSite. The site is the
// first frame in the user's or a dependency's code (stackcapture.OriginOf
// is OriginUser for its return PC, and stackcapture.SiteFrameOfPC names
// the frame among those the PC expands into); if there is none, the first
// frame outside the runtime, preferring the standard library's public
// packages to its internal ones (sync.(*Map).Store, not the
// internal/sync function it calls); if even that is missing, RuntimeSite.
// Frames are those each PC expands into, inlined calls included: a
// runtime function inlined into a standard-library one does not hide it.
func findSite(stk []uintptr) (f stackcapture.Frame, at int) {
	for i, pc := range stk {
		if stackcapture.OriginOf(pc) == stackcapture.OriginUser {
			if sf := stackcapture.SiteFrameOfPC(pc); sf != nil {
				return *sf, i
			}
		}
	}
	f, at = runtimeSiteFrame, -1
	for i, pc := range stk {
		for _, fr := range stackcapture.PCFrames(pc) {
			if isRuntime(fr) {
				continue
			}
			if !isStdInternal(pkgPath(fr.Function)) {
				return fr, i
			}
			if at < 0 {
				f, at = fr, i // if nothing public follows
			}
		}
	}
	return f, at
}

// siteOf returns the index of the site of a stack (findSite), making the
// site on first sight.
func (p *Profiler) siteOf(stk []uintptr) int32 {
	f, at := findSite(stk)
	key := f.String()
	if at < 0 {
		key = RuntimeSite
	}
	if i, ok := p.byLabel[key]; ok {
		return i
	}
	i := int32(len(p.sites))
	p.sites = append(p.sites, &siteState{frame: f, pcs: append([]uintptr(nil), stk...), at: at})
	p.byLabel[key] = i
	return i
}

// heaviestStack makes the stack that allocated most through s in this
// window (p.records, as read) the one s reports, if one allocated; called
// before a site's first report.
func (p *Profiler) heaviestStack(s *siteState) {
	if s.heavyWin <= 0 || int(s.heavy) >= len(p.records) {
		return
	}
	stk := p.records[s.heavy].Stack()
	if f, at := findSite(stk); at >= 0 && f.Function == s.frame.Function && f.File == s.frame.File && f.Line == s.frame.Line {
		s.pcs, s.at = append(s.pcs[:0], stk...), at
	}
}

// symbolize expands the site's stack (s.pcs) into frames, inlined
// calls included, and splits it at the site's frame: the stack from the
// site outward, and the path, the frames between the site and the
// allocation that are outside the runtime (compiler-generated wrappers
// dropped too), innermost last. The runtime's site has no path, and its
// stack is its frame alone.
func symbolize(s *siteState) (stack, path []stackcapture.Frame) {
	if s.at < 0 || len(s.pcs) == 0 {
		return []stackcapture.Frame{s.frame}, nil
	}
	var fs []stackcapture.Frame
	it := runtime.CallersFrames(s.pcs)
	for {
		f, more := it.Next()
		fs = append(fs, stackcapture.Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
		if !more {
			break
		}
	}
	// The site's PC is where its frames begin: CallersFrames gives a
	// return PC's frames at that PC less one. The site's frame is the
	// first of the site's function and line from there on (an inlined
	// call's caller comes from a PC of its own, further on).
	from := 0
	for i := range fs {
		if fs[i].PC+1 == s.pcs[s.at] {
			from = i
			break
		}
	}
	at := -1
	for i := from; i < len(fs) && at < 0; i++ {
		if fs[i].Function == s.frame.Function && fs[i].Line == s.frame.Line {
			at = i
		}
	}
	for i := from; i < len(fs) && at < 0; i++ {
		if fs[i].Function == s.frame.Function {
			at = i
		}
	}
	if at < 0 {
		return []stackcapture.Frame{s.frame}, nil
	}
	for i := at - 1; i >= 0; i-- {
		if !isRuntime(fs[i]) && fs[i].File != "<autogenerated>" {
			path = append(path, fs[i])
		}
	}
	return fs[at:], path
}
