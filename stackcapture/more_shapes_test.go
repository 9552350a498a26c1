package stackcapture

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"sync"
	"testing"
)

// waitGC runs garbage collections until ch has a value; a finalizer or
// cleanup runs after the collection that found its object unreachable.
func waitGC[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	for range 100 {
		runtime.GC()
		select {
		case v := <-ch:
			return v
		default:
		}
	}
	t.Fatal("no finalizer or cleanup ran after 100 collections")
	panic("unreachable")
}

type finObj struct{ _ [64]byte }

func TestCallersFromFinalizer(t *testing.T) {
	ch := make(chan []capture, 1)
	func() {
		o := &finObj{}
		runtime.SetFinalizer(o, func(*finObj) { ch <- captureMatrix() })
	}()
	checkCaptures(t, waitGC(t, ch), true)
}

func TestCallersFromCleanup(t *testing.T) {
	ch := make(chan []capture, 1)
	func() {
		o := &finObj{}
		runtime.AddCleanup(o, func(int) { nest(2, func() { ch <- captureMatrix() }) }, 0)
	}()
	checkCaptures(t, waitGC(t, ch), true)
}

// randomShape calls at below a random sequence of the shapes above.
func randomShape(r *rand.Rand, depth int, at func()) {
	if depth == 0 {
		at()
		return
	}
	next := func() { randomShape(r, depth-1, at) }
	switch r.IntN(10) {
	case 0:
		nest(r.IntN(3), next)
	case 1:
		inlOuter(next)
	case 2:
		mv := (&shapeT{n: r.IntN(2)}).method
		mv(next)
	case 3:
		var i shapeI = &shapeT{}
		i.valueMethod(next)
	case 4:
		generic(depth, next)
	case 5:
		reflect.ValueOf(nest).Call([]reflect.Value{reflect.ValueOf(0), reflect.ValueOf(next)})
	case 6:
		func() { defer deferAt(next) }()
	case 7:
		f := func() { next() }
		f()
	case 8:
		viaSmallI(shapeT{n: 1}, next) // a wrapper with the method inlined
	case 9:
		viaSmallI(zeroSize{}, next) // likewise, of a zero-size value
	}
}

func TestCallersRandomShapes(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range 60 {
		depth := r.IntN(30)
		var cs []capture
		randomShape(r, depth, func() { cs = captureMatrix() })
		before := t.Failed()
		checkCaptures(t, cs, true)
		if t.Failed() && !before {
			t.Fatalf("shape %d (depth %d) failed", i, depth)
		}
	}
}

// Concurrent captures, with verdicts filled and read by many goroutines
// at once (run with -race).
func TestCallersConcurrent(t *testing.T) {
	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range rounds {
				var c capture
				randomShape(r, r.IntN(12), func() { c = captureAt(0, MaxDepth) })
				if !sameFrames(c.fast, c.slow) {
					errs <- "Callers:" + framesString(c.fast) + "\nruntime.Callers:" + framesString(c.slow)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
