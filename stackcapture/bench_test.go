package stackcapture

import (
	"fmt"
	"runtime"
	"testing"
)

//go:noinline
func benchAt(depth int, b *testing.B, walk bool) {
	if depth > 0 {
		benchAt(depth-1, b, walk)
		return
	}
	var pcs [MaxDepth]uintptr
	for b.Loop() {
		if walk {
			Callers(0, pcs[:])
		} else {
			runtime.Callers(1, pcs[:])
		}
	}
}

// BenchmarkCallers captures a stack of about depth frames (the recursion
// plus the testing package's few) with the walk and with runtime.Callers.
func BenchmarkCallers(b *testing.B) {
	for _, walk := range []string{"fp", "runtime"} {
		for _, depth := range []int{8, 16, 32} {
			b.Run(fmt.Sprintf("walk=%s/depth=%d", walk, depth), func(b *testing.B) {
				if walk == "fp" && !FramePointerWalk() {
					b.Skip("no frame-pointer walk on " + runtime.GOARCH)
				}
				benchAt(depth-4, b, walk == "fp") // testing adds about four frames
			})
		}
	}
}
