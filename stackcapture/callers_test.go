package stackcapture

import (
	"fmt"
	"runtime"
	"testing"
)

// testCallers has Callers's frame shape and skip, and reports whether the
// frame-pointer walk produced the result.
//
//go:noinline
func testCallers(skip int, pcs []uintptr, fast *bool) int {
	if callersFPEnabled() {
		if n, ok := callersFP(skip, pcs); ok {
			*fast = true
			return n
		}
	}
	*fast = false
	return runtime.Callers(skip+2, pcs)
}

// capture is one comparison of the walk with runtime.Callers.
type capture struct {
	skip, size int
	fast, slow []uintptr
	usedFP     bool
}

// captureAt captures with both unwinders on one line, so that skip 0 is
// the same line of captureAt for both.
//
//go:noinline
func captureAt(skip, size int) capture {
	c := capture{skip: skip, size: size, fast: make([]uintptr, size), slow: make([]uintptr, size)}
	n, m := testCallers(skip, c.fast, &c.usedFP), runtime.Callers(skip+1, c.slow)
	c.fast, c.slow = c.fast[:n], c.slow[:m]
	return c
}

var captureSizes = []int{1, 2, 5, MaxDepth, 200}

// captureMatrix captures at several skips and buffer sizes; the last
// capture is skip 0 with a buffer larger than any stack here.
//
//go:noinline
func captureMatrix() []capture {
	var cs []capture
	for _, size := range captureSizes {
		for skip := 3; skip >= 0; skip-- {
			cs = append(cs, captureAt(skip, size))
		}
	}
	return cs
}

func framesString(pcs []uintptr) string {
	s := ""
	for _, f := range symbolize(pcs) {
		s += fmt.Sprintf("\n\t%s %s:%d", f.Function, f.File, f.Line)
	}
	return s
}

// checkCaptures fails t unless every capture symbolizes as runtime.Callers'
// does, and, with wantFast, unless the walk served the untruncated skip 0
// capture.
func checkCaptures(t *testing.T, cs []capture, wantFast bool) {
	t.Helper()
	if len(cs) == 0 {
		t.Fatal("no captures")
	}
	for _, c := range cs {
		if !sameFrames(c.fast, c.slow) {
			t.Errorf("skip %d size %d (walk used: %v): Callers:%s\nruntime.Callers:%s", c.skip, c.size, c.usedFP, framesString(c.fast), framesString(c.slow))
		}
	}
	if last := cs[len(cs)-1]; wantFast && haveFramePointers && !last.usedFP {
		t.Errorf("the frame-pointer walk fell back on this stack:%s", framesString(last.slow))
	}
}
