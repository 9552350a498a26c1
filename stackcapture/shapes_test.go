package stackcapture

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// The shapes below call at() below some arrangement of frames.

//go:noinline
func nest(depth int, at func()) {
	if depth == 0 {
		at()
		return
	}
	nest(depth-1, at)
}

// inlA and inlB are small enough to be inlined into inlOuter: the return
// address into inlOuter expands to three frames.
func inlA(at func()) { inlB(at) }
func inlB(at func()) { at() }

//go:noinline
func inlOuter(at func()) { inlA(at) }

type shapeT struct{ n int }

//go:noinline
func (s *shapeT) method(at func()) { nest(s.n, at) }

//go:noinline
func (s shapeT) valueMethod(at func()) { nest(s.n, at) }

type shapeI interface{ valueMethod(func()) }

// smallValue is small enough to be inlined, into its callers and into its
// pointer wrapper (*shapeT).smallValue, which calls through smallI use.
func (s shapeT) smallValue(at func()) { at() }

type zeroSize struct{}

func (zeroSize) smallValue(at func()) { at() }

type smallI interface{ smallValue(func()) }

//go:noinline
func viaSmallI(i smallI, at func()) { i.smallValue(at) }

//go:noinline
func generic[T any](x T, at func()) {
	_ = x
	at()
}

type genT[T any] struct{ x T }

//go:noinline
func (g *genT[T]) method(at func()) { at() }

//go:noinline
func deferAt(at func()) { at() }

// run calls shape with an at that records a capture matrix and returns
// the matrix.
func run(shape func(at func())) []capture {
	var cs []capture
	shape(func() { cs = captureMatrix() })
	return cs
}

func TestCallersShapes(t *testing.T) {
	tests := []struct {
		name     string
		shape    func(at func())
		wantFast bool
	}{
		{"plain", func(at func()) { nest(5, at) }, true},
		{"deeper than MaxDepth", func(at func()) { nest(MaxDepth+7, at) }, true},
		{"deeper than the buffer", func(at func()) { nest(250, at) }, true},
		{"inlined", func(at func()) { nest(2, func() { inlOuter(func() { nest(1, at) }) }) }, true},
		{"inlined at the capture", func(at func()) { inlOuter(at) }, true},
		{"closures", func(at func()) {
			x := 2
			f := func() {
				g := func() { nest(x, at) }
				g()
			}
			f()
		}, true},
		{"method value", func(at func()) {
			mv := (&shapeT{n: 2}).method
			nest(1, func() { mv(at) })
		}, true},
		{"pointer wrapper via interface", func(at func()) {
			var i shapeI = &shapeT{n: 1}
			i.valueMethod(at)
		}, true},
		// A value method small enough to be inlined into its pointer
		// wrapper: runtime.Callers hides the wrapper and shows the method.
		{"wrapper with the method inlined", func(at func()) { viaSmallI(&shapeT{n: 1}, at) }, true},
		{"wrapper of a value in an interface", func(at func()) { viaSmallI(shapeT{n: 1}, at) }, true},
		{"wrapper of a zero-size value", func(at func()) { viaSmallI(zeroSize{}, at) }, true},
		{"method expression", func(at func()) { (*shapeT).method(&shapeT{n: 1}, at) }, true},
		{"generic", func(at func()) {
			generic("s", func() { generic(3, func() { (&genT[float64]{}).method(at) }) })
		}, true},
		{"go statement", func(at func()) {
			done := make(chan struct{})
			go func(n int) { defer close(done); nest(n, at) }(2)
			<-done
		}, true},
		{"go statement wrapper", func(at func()) {
			done := make(chan struct{})
			go nest(1, func() { defer close(done); at() })
			<-done
		}, true},
		{"deferred on return", func(at func()) {
			func() {
				defer deferAt(at) // a deferwrap closure, called by deferreturn
			}()
		}, true},
		{"deferred during panic", func(at func()) {
			func() {
				defer func() { recover() }()
				defer deferAt(at)
				func() {
					defer func() { nest(1, at) }()
					panic("shape")
				}()
			}()
		}, true},
		{"reflect.Value.Call", func(at func()) {
			reflect.ValueOf(nest).Call([]reflect.Value{reflect.ValueOf(2), reflect.ValueOf(at)})
		}, true},
		{"reflect method", func(at func()) {
			reflect.ValueOf(&shapeT{n: 1}).MethodByName("Exported").Call([]reflect.Value{reflect.ValueOf(at)})
		}, true},
		{"after stack growth", func(at func()) {
			grow(2000)
			nest(3, at)
		}, true},
		{"during stack growth", func(at func()) { growThen(300, at) }, true},
		// sigpanic was injected by the signal handler: the walk must not
		// cross it, runtime.Callers must serve the full stack.
		{"nil dereference", func(at func()) {
			defer func() {
				if recover() == nil {
					panic("no panic")
				}
			}()
			defer func() { at() }()
			var p *shapeT
			nilDeref(p)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkCaptures(t, run(tt.shape), tt.wantFast)
		})
	}
}

func (s *shapeT) Exported(at func()) { nest(s.n, at) }

//go:noinline
func nilDeref(p *shapeT) { p.n++ }

// grow recurses with big frames, so the stack is grown and copied.
//
//go:noinline
func grow(depth int) byte {
	var buf [512]byte
	buf[depth%len(buf)] = byte(depth)
	if depth == 0 {
		return buf[0]
	}
	return grow(depth-1) + buf[depth%len(buf)]
}

//go:noinline
func growThen(depth int, at func()) {
	var buf [256]byte
	buf[depth%len(buf)] = byte(depth)
	if depth == 0 {
		at()
		return
	}
	growThen(depth-1, at)
	runtime.KeepAlive(buf)
}

// The nil dereference capture must have crossed runtime.sigpanic, and its
// untruncated result must show it; the walk must have declined.
func TestCallersSigpanicFallsBack(t *testing.T) {
	var cs []capture
	func() {
		defer func() { recover() }()
		defer func() { cs = captureMatrix() }()
		nilDeref(nil)
	}()
	checkCaptures(t, cs, false)
	last := cs[len(cs)-1]
	if !strings.Contains(framesString(last.slow), "runtime.sigpanic") {
		t.Fatalf("no sigpanic frame:%s", framesString(last.slow))
	}
	if last.usedFP {
		t.Fatalf("the walk crossed runtime.sigpanic")
	}
}

// The last frame of a goroutine's stack is runtime.goexit, for both.
func TestCallersEndsAtGoexit(t *testing.T) {
	cs := run(func(at func()) { nest(3, at) })
	last := cs[len(cs)-1]
	for name, pcs := range map[string][]uintptr{"Callers": last.fast, "runtime.Callers": last.slow} {
		fr := symbolize(pcs)
		if len(fr) == 0 || fr[len(fr)-1].Function != "runtime.goexit" {
			t.Errorf("%s does not end at runtime.goexit:%s", name, framesString(pcs))
		}
	}
}

// Truncation: a buffer of size n gets the first n frames of the full stack.
func TestCallersTruncates(t *testing.T) {
	for _, shape := range []func(func()){
		func(at func()) { nest(MaxDepth*2, at) },
		func(at func()) { nest(MaxDepth-4, func() { inlOuter(func() { nest(10, at) }) }) },
	} {
		cs := run(shape)
		full := symbolize(cs[len(cs)-1].slow)
		for _, c := range cs {
			got := symbolize(c.fast)
			if c.skip != 0 {
				continue
			}
			if want := min(c.size, len(full)); len(got) != want {
				t.Errorf("size %d: %d frames, want %d", c.size, len(got), want)
				continue
			}
			for i := 1; i < len(got); i++ { // frame 0: captureAt, per size its own line
				if got[i].Function != full[i].Function || got[i].Line != full[i].Line {
					t.Errorf("size %d frame %d: %v, want %v", c.size, i, got[i], full[i])
				}
			}
		}
	}
}

// The walk's result interns and symbolizes as runtime.Callers' does.
func TestCallersWithTable(t *testing.T) {
	cs := run(func(at func()) { inlOuter(func() { nest(2, at) }) })
	tab, _ := NewTable()
	for _, c := range cs {
		a, b := tab.Intern(c.fast), tab.Intern(c.slow)
		if a.Site() != b.Site() && (a.Site().Function != b.Site().Function || a.Site().Line != b.Site().Line) {
			t.Errorf("size %d skip %d: Site %v, want %v", c.size, c.skip, a.Site(), b.Site())
		}
		if len(a.Frames()) != len(b.Frames()) {
			t.Errorf("size %d skip %d: %d frames, want %d", c.size, c.skip, len(a.Frames()), len(b.Frames()))
		}
	}
}

func TestSetFramePointerWalk(t *testing.T) {
	was := SetFramePointerWalk(false)
	defer SetFramePointerWalk(was)
	if !was {
		t.Fatal("the walk was off by default")
	}
	if FramePointerWalk() {
		t.Fatal("FramePointerWalk() after SetFramePointerWalk(false)")
	}
	var a, b [MaxDepth]uintptr
	n, m := Callers(0, a[:]), runtime.Callers(1, b[:])
	// Off, Callers is runtime.Callers: the same PCs but the first, a
	// different call on the same line.
	if n != m || n < 2 || [MaxDepth - 1]uintptr(a[1:]) != [MaxDepth - 1]uintptr(b[1:]) || !sameFrames(a[:1], b[:1]) {
		t.Fatalf("off: Callers %x, runtime.Callers %x", a[:n], b[:m])
	}
	if SetFramePointerWalk(true) {
		t.Fatal("SetFramePointerWalk(false) did not stick")
	}
	if FramePointerWalk() != haveFramePointers {
		t.Fatalf("FramePointerWalk() = %v on %s", FramePointerWalk(), runtime.GOARCH)
	}
}
