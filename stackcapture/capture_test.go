package stackcapture

import (
	"runtime"
	"strings"
	"testing"
)

//go:noinline
func siteOfCall() (Frame, int) {
	_, _, line, _ := runtime.Caller(0)
	pc := CallerPC(0) // this line is line+1
	return SiteOfPC(pc), line + 1
}

//go:noinline
func siteOfParent() uintptr { return CallerPC(1) }

func TestCallerPCNamesTheCallingLine(t *testing.T) {
	f, line := siteOfCall()
	if !strings.HasSuffix(f.Function, ".siteOfCall") || f.Line != line || !strings.HasSuffix(f.File, "capture_test.go") {
		t.Fatalf("CallerPC(0) symbolized to %v, want siteOfCall at capture_test.go:%d", f, line)
	}
}

func TestCallerPCSkipOne(t *testing.T) {
	_, _, line, _ := runtime.Caller(0)
	pc := siteOfParent() // line+1
	f := SiteOfPC(pc)
	if !strings.HasSuffix(f.Function, ".TestCallerPCSkipOne") || f.Line != line+1 {
		t.Fatalf("CallerPC(1) symbolized to %v, want TestCallerPCSkipOne line %d", f, line+1)
	}
}

func TestCallerPCAgreesWithRuntimeCallers(t *testing.T) {
	calibrateOnce.Do(calibrate)
	if haveFramePointers && !fpUsable {
		t.Fatalf("frame-pointer walk failed calibration on %s", runtime.GOARCH)
	}
	// Skip 0 is a PC in this function and 1 one in testing.tRunner; the
	// two calls sit on one line, so they must symbolize identically and,
	// for skip 1, be the same return address. (Higher up, compiler-made
	// wrappers such as a go statement's count as frames here while
	// runtime.Callers hides them.)
	for skip := range 2 {
		var pcs [1]uintptr
		fast, _ := CallerPC(skip), runtime.Callers(skip+1, pcs[:])
		f, g := SiteOfPC(fast), SiteOfPC(pcs[0])
		if f.Function != g.Function || f.Line != g.Line {
			t.Errorf("skip %d: CallerPC at %v, runtime.Callers at %v", skip, f, g)
		}
		if skip == 1 && fast != pcs[0] {
			t.Errorf("skip 1: CallerPC = %#x, runtime.Callers = %#x", fast, pcs[0])
		}
	}
}

func TestCallersMatchesRuntime(t *testing.T) {
	var a, b [MaxDepth]uintptr
	// One line: both name the same line of this function.
	n, m := Callers(0, a[:]), runtime.Callers(1, b[:])
	if n == 0 || m == 0 {
		t.Fatalf("Callers wrote %d PCs, runtime.Callers %d", n, m)
	}
	// The walk writes physical return addresses; compare what they
	// symbolize to.
	if !sameFrames(a[:n], b[:m]) {
		t.Fatalf("Callers: %v\nruntime.Callers: %v", symbolize(a[:n]), symbolize(b[:m]))
	}
}

func TestNegativeSkipPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"CallerPC": func() { CallerPC(-1) },
		"Callers":  func() { Callers(-1, make([]uintptr, 1)) },
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "stackcapture."+name+": negative skip") {
					t.Errorf("%s(-1) panicked with %v", name, r)
				}
			}()
			f()
		}()
	}
}

func TestCallerPCDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { CallerPC(0) }); n != 0 {
		t.Fatalf("CallerPC allocates %v times", n)
	}
}

//go:noinline
func callersAtDepth(depth int, pcs []uintptr) int {
	if depth == 0 {
		return Callers(0, pcs)
	}
	return callersAtDepth(depth-1, pcs)
}

// TestCallersDoesNotAllocate: once a stack's verdicts are cached, capturing
// it again computes none and allocates nothing, whatever the binary's
// layout puts in the same cache set.
func TestCallersDoesNotAllocate(t *testing.T) {
	if !FramePointerWalk() {
		t.Skip("frame-pointer walk off on this platform")
	}
	var pcs [MaxDepth]uintptr
	for _, depth := range []int{0, 5, 20, 40} {
		callersAtDepth(depth, pcs[:]) // fills the verdicts
		if n := testing.AllocsPerRun(100, func() { callersAtDepth(depth, pcs[:]) }); n != 0 {
			t.Errorf("depth %d: %v allocations per capture, want 0", depth, n)
		}
	}
}
