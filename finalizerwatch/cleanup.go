package finalizerwatch

import (
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/stackcapture"
)

// Cleanup is a handle to a cleanup registered with AddCleanup.
type Cleanup struct {
	c runtime.Cleanup
	h *cleanupHeader
}

// Stop cancels the cleanup call, as runtime.Cleanup.Stop does: it has no
// effect if the cleanup has already been queued for execution or run. A
// stopped registration counts as cleared. Stop on the zero Cleanup does
// nothing.
func (c Cleanup) Stop() {
	if c.h == nil {
		return
	}
	c.c.Stop()
	if c.h.state.CompareAndSwap(cleanupPending, cleanupStopped) {
		c.h.site.cleared.Add(1)
		c.h.site.ages.remove(c.h.cyc, c.h.w.cycles[KindCleanup].Load())
	}
}

// The states of a cleanup registration, which decide whether it is counted
// as executed or as cleared. If Stop loses the race with a cleanup that was
// already queued, the cleanup still runs (as the runtime defines) and is
// counted as executed.
const (
	cleanupPending uint32 = iota
	cleanupRan
	cleanupStopped
)

type cleanupHeader struct {
	w     *Watcher
	site  *site
	cyc   uint32
	state atomic.Uint32
}

// cleanupRec is the one allocation a registration makes: the runtime holds
// it as the cleanup's argument.
type cleanupRec[S any] struct {
	h   cleanupHeader
	fn  func(S)
	arg S
}

// runner is what runCleanup calls: a *cleanupRec of any argument type.
type runner interface{ run() }

// runCleanup is the cleanup the runtime holds for every registration. It
// is a plain function, not the method expression (*cleanupRec[S]).run:
// in shape-stenciled generic code that would be a closure over the type's
// dictionary, allocated on every registration.
func runCleanup(r runner) { r.run() }

func (r *cleanupRec[S]) run() {
	counted := r.h.state.CompareAndSwap(cleanupPending, cleanupRan)
	start := time.Now()
	r.fn(r.arg)
	d := time.Since(start)
	if counted {
		r.h.site.executed.Add(1)
		r.h.site.ages.remove(r.h.cyc, r.h.w.cycles[KindCleanup].Load())
		r.h.site.dur.observe(d)
	}
}

// AddCleanup is runtime.AddCleanup with the registration counted at its call
// site in Default's ledger. Its semantics are the runtime's: cleanup(arg)
// is called on a separate goroutine some time after ptr becomes
// unreachable; arg must not be ptr or reach it, or the cleanup never runs.
// Bad arguments (ptr nil, cleanup nil, arg equal to ptr, ptr not in an
// allocated block) panic with a message that begins
// "finalizerwatch.AddCleanup:".
//
// The watcher keeps no reference to ptr; it makes one allocation per
// registration (the record the runtime passes to its cleanup).
//
//go:noinline
func AddCleanup[T, S any](ptr *T, cleanup func(S), arg S) Cleanup {
	return addCleanup(Default, ptr, cleanup, arg, stackcapture.CallerPC(1))
}

// AddCleanupTo is AddCleanup counted in w's ledger (Go methods cannot have
// type parameters).
//
//go:noinline
func AddCleanupTo[T, S any](w *Watcher, ptr *T, cleanup func(S), arg S) Cleanup {
	if w == nil {
		panic("finalizerwatch.AddCleanupTo: nil Watcher")
	}
	return addCleanup(w, ptr, cleanup, arg, stackcapture.CallerPC(1))
}

//go:noinline
func addCleanup[T, S any](w *Watcher, ptr *T, cleanup func(S), arg S, pc uintptr) (c Cleanup) {
	const fn = "finalizerwatch.AddCleanup"
	if ptr == nil {
		panic(fn + ": ptr is nil")
	}
	if cleanup == nil {
		panic(fn + ": cleanup is nil")
	}
	if k := reflect.TypeFor[S]().Kind(); k == reflect.Pointer || k == reflect.UnsafePointer {
		if *(*unsafe.Pointer)(unsafe.Pointer(&arg)) == unsafe.Pointer(ptr) {
			panic(fn + ": ptr is equal to arg, cleanup will never run")
		}
	}
	if unsafe.Sizeof(*ptr) == 0 {
		// Zero-size objects share one address; the runtime ignores them.
		return Cleanup{c: runtime.AddCleanup(ptr, cleanup, arg)}
	}
	w.init()
	s := w.siteFor(KindCleanup, pc, 2)
	r := &cleanupRec[S]{fn: cleanup, arg: arg}
	r.h.w, r.h.site = w, s
	// Counted before the runtime call: once AddCleanup returns, ptr may be
	// collected and the cleanup run before this function goes on.
	r.h.cyc = w.account(s)
	defer func() {
		if p := recover(); p != nil {
			w.unaccount(s, r.h.cyc)
			panic(fmt.Sprintf("%s: %v", fn, p))
		}
	}()
	rc := runtime.AddCleanup(ptr, runCleanup, runner(r))
	if rc == (runtime.Cleanup{}) {
		// The runtime registered nothing (ptr is not a heap object, e.g. a
		// global): neither does the ledger.
		w.unaccount(s, r.h.cyc)
		return Cleanup{}
	}
	return Cleanup{c: rc, h: &r.h}
}
