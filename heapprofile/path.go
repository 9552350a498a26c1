package heapprofile

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gcprobe/probe/internal/symname"
)

// Bounds of Site.PathString.
const (
	// MaxPathHops is how many frames of the path PathString shows after
	// the site: a longer path shows its first frame, "…", and its last
	// MaxPathHops-1.
	MaxPathHops = 3
	// MaxPathLen bounds PathString's length in bytes.
	MaxPathLen = 256
	// maxHopLen bounds one hop's function name in bytes.
	maxHopLen = 64
)

// PathString renders the site and its path on one line, for reading:
// the site as "file:line" (its file's base name), then each frame of the
// path as its function, without the folders of a module's package path,
// down to the allocation: "responsewriter.go:50 → io.copyBuffer". A path
// of more than MaxPathHops frames keeps the first and the innermost ones
// around "…"; the whole is valid UTF-8 of at most MaxPathLen bytes. A
// site without a path renders as the site alone; the runtime's site as
// RuntimeSite.
func (s *Site) PathString() string {
	var b strings.Builder
	if s.Frame.File == "" && s.Frame.Line == 0 {
		b.WriteString(shortFunc(s.Frame.Function))
	} else {
		b.WriteString(filepath.Base(s.Frame.File))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(s.Frame.Line))
	}
	hop := func(h string) {
		b.WriteString(" → ")
		b.WriteString(h)
	}
	n := len(s.Path)
	for i, f := range s.Path {
		switch {
		case n <= MaxPathHops || i == 0 || i >= n-(MaxPathHops-1):
			hop(shortFunc(f.Function))
		case i == 1:
			hop("…")
		}
	}
	out := strings.ToValidUTF8(b.String(), "\uFFFD")
	if len(out) > MaxPathLen {
		out = symname.CutUTF8(out[:MaxPathLen-len("…")]) + "…"
	}
	return out
}

// shortFunc returns a function's name without the folders of its module's
// package path ("github.com/x/caddyhttp.(*W).ReadFrom" is
// "caddyhttp.(*W).ReadFrom"; the standard library's keep theirs), at most
// maxHopLen bytes, its middle cut to "…" beyond.
func shortFunc(fn string) string {
	pkg := symname.PkgPath(fn)
	root, _, _ := strings.Cut(pkg, "/")
	if i := strings.LastIndexByte(pkg, '/'); i >= 0 && strings.Contains(root, ".") {
		fn = fn[i+1:] // a module's; the standard library's paths are short, and internal/sync is not sync
	}
	fn = strings.ToValidUTF8(fn, "\uFFFD")
	if len(fn) <= maxHopLen {
		return fn
	}
	half := (maxHopLen - len("…")) / 2
	return symname.CutUTF8(fn[:half]) + "…" + symname.CutUTF8Front(fn[len(fn)-half:])
}
