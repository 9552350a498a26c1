package pprofexporter

import (
	"runtime"
	"slices"
	"testing"

	"github.com/gcprobe/probe/stackcapture"
)

// inlinedCapture is inlined into its callers, so that the stacks captured
// below have a frame with an inlining chain.
func inlinedCapture(walk bool) []uintptr {
	return captureNoinline(walk)
}

//go:noinline
func captureNoinline(walk bool) []uintptr {
	pcs := make([]uintptr, 32)
	var n int
	if walk {
		n = stackcapture.Callers(0, pcs)
	} else {
		n = runtime.Callers(1, pcs)
	}
	return pcs[:n]
}

//go:noinline
func captureBoth() (physical, logical []uintptr) {
	return inlinedCapture(true), inlinedCapture(false) // both inline inlinedCapture here
}

// TestSymbolsPhysicalAndLogicalStacks checks that symbolizing a stack PC
// by PC (retFrames, through the process's frame cache) gives the frames
// runtime.CallersFrames gives for the whole stack, whether
// the stack holds physical return PCs (stackcapture's frame-pointer walk)
// or runtime.Callers's logical ones, with inlined frames in either.
func TestSymbolsPhysicalAndLogicalStacks(t *testing.T) {
	physical, logical := captureBoth()
	want := callersFrames(logical)
	if !slices.ContainsFunc(want, func(f stackcapture.Frame) bool {
		return f.Function == "github.com/gcprobe/probe/exporters/pprof.inlinedCapture"
	}) {
		t.Fatalf("test broken: no inlined frame in %v", want)
	}
	for name, pcs := range map[string][]uintptr{"physical": physical, "logical": logical} {
		var got []stackcapture.Frame
		for i, pc := range pcs {
			var next uintptr
			if i+1 < len(pcs) {
				next = pcs[i+1]
			}
			got = retFrames(pc, next, got)
		}
		// The innermost frames differ by their line (the two calls in
		// captureNoinline); the rest must be the same.
		if len(got) == 0 || got[0].Function != want[0].Function || !sameFunctionsAndLines(got[1:], want[1:]) {
			t.Errorf("%s stack symbolized to\n%v\nwant\n%v", name, got, want)
		}
	}
}

func callersFrames(pcs []uintptr) []stackcapture.Frame {
	var out []stackcapture.Frame
	it := runtime.CallersFrames(pcs)
	for {
		f, more := it.Next()
		out = append(out, stackcapture.Frame{Function: f.Function, File: f.File, Line: f.Line})
		if !more {
			return out
		}
	}
}

func sameFunctionsAndLines(a, b []stackcapture.Frame) bool {
	return slices.EqualFunc(a, b, func(x, y stackcapture.Frame) bool {
		return x.Function == y.Function && x.File == y.File && x.Line == y.Line
	})
}
