package finalizerwatch

import (
	"runtime"
	"testing"
)

// obj32 is a fresh 32-byte object with a pointer, as registrations in
// real programs mostly are.
type obj32 struct {
	p *int
	a [3]uint64
}

func noopFinalizer(*obj32) {}
func noopCleanup(int)      {}

// registerAll times fn over b.N preallocated objects, then clears what
// was registered so that no finalizer runs during later benchmarks.
func registerAll(b *testing.B, fn func(*obj32), clearFn func(*obj32)) {
	objs := make([]*obj32, b.N)
	for i := range objs {
		objs[i] = &obj32{}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range objs {
		fn(objs[i])
	}
	b.StopTimer()
	for _, o := range objs {
		clearFn(o)
	}
}

// atDepth calls fn from depth extra frames, so full-stack capture sees a
// realistic stack (about ten frames with the testing harness).
//
//go:noinline
func atDepth(depth int, fn func()) {
	if depth == 0 {
		fn()
		return
	}
	atDepth(depth-1, fn)
}

// The benchmarks come in three shapes. keepalive registers on b.N live
// objects, so the runtime's and the watcher's tables grow to b.N (a burst
// of long-lived registrations); setclear registers and clears at once, the
// tables staying small (the os.File pattern: Close clears the finalizer);
// churn registers on objects that are dropped at once, so GC and the
// finalizer goroutine run alongside (the steady state of most programs).

func BenchmarkSetFinalizerSetClear(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		o := &obj32{}
		for range b.N {
			runtime.SetFinalizer(o, noopFinalizer)
			runtime.SetFinalizer(o, nil)
		}
	})
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"watched", nil}, {"watched-fullstacks", []Option{WithFullStacks(true)}}} {
		b.Run(mode.name, func(b *testing.B) {
			w := newWatcher(b, mode.opts...)
			b.ReportAllocs()
			o := &obj32{}
			atDepth(5, func() {
				for range b.N {
					w.SetFinalizer(o, noopFinalizer)
					w.SetFinalizer(o, nil)
				}
			})
		})
	}
}

func BenchmarkSetFinalizerChurn(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			runtime.SetFinalizer(&obj32{}, noopFinalizer)
		}
	})
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"watched", nil}, {"watched-fullstacks", []Option{WithFullStacks(true)}}} {
		b.Run(mode.name, func(b *testing.B) {
			w := newWatcher(b, mode.opts...)
			b.ReportAllocs()
			atDepth(5, func() {
				for range b.N {
					w.SetFinalizer(&obj32{}, noopFinalizer)
				}
			})
		})
	}
}

func BenchmarkAddCleanupChurn(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			runtime.AddCleanup(&obj32{}, noopCleanup, 0)
		}
	})
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"watched", nil}, {"watched-fullstacks", []Option{WithFullStacks(true)}}} {
		b.Run(mode.name, func(b *testing.B) {
			w := newWatcher(b, mode.opts...)
			b.ReportAllocs()
			atDepth(5, func() {
				for range b.N {
					AddCleanupTo(w, &obj32{}, noopCleanup, 0)
				}
			})
		})
	}
}

func BenchmarkSetFinalizerKeepAlive(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		registerAll(b, func(o *obj32) { runtime.SetFinalizer(o, noopFinalizer) },
			func(o *obj32) { runtime.SetFinalizer(o, nil) })
	})
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"watched", nil}, {"watched-fullstacks", []Option{WithFullStacks(true)}}} {
		b.Run(mode.name, func(b *testing.B) {
			w := newWatcher(b, mode.opts...)
			atDepth(5, func() {
				registerAll(b, func(o *obj32) { w.SetFinalizer(o, noopFinalizer) },
					func(o *obj32) { w.SetFinalizer(o, nil) })
			})
		})
	}
}

func BenchmarkAddCleanupKeepAlive(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		var cs []runtime.Cleanup
		registerAll(b, func(o *obj32) { cs = append(cs, runtime.AddCleanup(o, noopCleanup, 0)) },
			func(*obj32) {})
		for _, c := range cs {
			c.Stop()
		}
	})
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"watched", nil}, {"watched-fullstacks", []Option{WithFullStacks(true)}}} {
		b.Run(mode.name, func(b *testing.B) {
			w := newWatcher(b, mode.opts...)
			var cs []Cleanup
			atDepth(5, func() {
				registerAll(b, func(o *obj32) { cs = append(cs, AddCleanupTo(w, o, noopCleanup, 0)) },
					func(*obj32) {})
			})
			for _, c := range cs {
				c.Stop()
			}
		})
	}
}

// BenchmarkFinalizerRun times what the watcher adds to each finalizer run:
// the runtime calls runFinalizer, which finds and calls the user's
// finalizer. "direct" is the user's finalizer called directly.
func BenchmarkFinalizerRun(b *testing.B) {
	objs := make([]*obj32, b.N)
	for i := range objs {
		objs[i] = &obj32{}
	}
	b.Run("direct", func(b *testing.B) {
		for i := range b.N {
			noopFinalizer(objs[i%len(objs)])
		}
	})
	b.Run("watched", func(b *testing.B) {
		w := newWatcher(b)
		objs := make([]*obj32, b.N)
		for i := range objs {
			objs[i] = &obj32{}
			w.SetFinalizer(objs[i], noopFinalizer)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, o := range objs {
			runFinalizer(o) // what the runtime does when o is collected
		}
		b.StopTimer()
		for _, o := range objs {
			runtime.SetFinalizer(o, nil) // the entries are gone already
		}
	})
}
