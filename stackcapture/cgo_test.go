package stackcapture

import (
	"strings"
	"testing"

	"github.com/gcprobe/probe/internal/cgocall"
)

// Stacks that cross a cgo callback: Go called C, which called back into
// Go. runtime.Callers crosses the callback (runtime.cgocallback and the
// C frames between) to the Go frames that called C; the frame-pointer
// walk must not follow a frame pointer through it, and falls back.
func TestCallersThroughCgoCallback(t *testing.T) {
	if !cgocall.Available {
		t.Skip("built without cgo (no C compiler found, or CGO_ENABLED=0): no cgo callback to capture through")
	}
	shapes := []struct {
		name  string
		shape func(at func())
	}{
		{"callback", func(at func()) { cgocall.Through(func() { nest(3, at) }) }},
		{"callback in a callback", func(at func()) {
			cgocall.Through(func() { nest(1, func() { cgocall.Through(func() { nest(2, at) }) }) })
		}},
		{"Go below the callback", func(at func()) { nest(4, func() { cgocall.Through(at) }) }},
	}
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			cs := run(s.shape)
			checkCaptures(t, cs, false)
			last := cs[len(cs)-1]
			if !strings.Contains(framesString(last.slow), "cgocallback") {
				t.Fatalf("runtime.Callers shows no cgo callback:%s", framesString(last.slow))
			}
			if last.usedFP {
				t.Fatalf("the walk crossed a cgo callback:%s", framesString(last.fast))
			}
		})
	}
}

// A callback on a thread C created: the goroutine the runtime makes for
// it has no Go frames below the callback.
func TestCallersOnCThread(t *testing.T) {
	if !cgocall.Available {
		t.Skip("built without cgo (no C compiler found, or CGO_ENABLED=0): no C thread to capture on")
	}
	var cs []capture
	if err := cgocall.OnCThread(func() { nest(3, func() { cs = captureMatrix() }) }); err != nil {
		t.Fatal(err)
	}
	checkCaptures(t, cs, false)
	if last := cs[len(cs)-1]; !strings.Contains(framesString(last.slow), "cgocallback") {
		t.Fatalf("runtime.Callers shows no cgo callback:%s", framesString(last.slow))
	}
}
