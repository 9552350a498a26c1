package finalizerwatch

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
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
// effect if the cleanup has already been queued for execution or run. Stop
// on the zero Cleanup does nothing.
//
// runtime.Cleanup.Stop does not say whether it removed the cleanup, so a
// stopped registration is counted only once its fate is known: as
// executed, when it runs after all (the runtime had already queued it), or
// as cleared, once the runtime's cleanup queue has been seen empty after
// the Stop, so that it can no longer run (see settleStops). Until then,
// usually a millisecond, it counts as outstanding, but no longer as a
// suspect. So the cleared and executed counts never go down.
func (c Cleanup) Stop() {
	c.c.Stop()
	if c.h == nil {
		return
	}
	f := c.h.state.Load() & cleanupSampled
	if c.h.state.CompareAndSwap(cleanupPending|f, cleanupStopped|f) {
		refSite(c.h.ref, f != 0).done(KindCleanup, c.h.cyc)
		stops.add(c.h)
	}
}

// The states of a cleanup registration, which decide whether it is counted
// as executed or as cleared. A registration is pending until it runs (ran:
// counted executed) or is stopped. A stopped one runs if the runtime had
// queued it before the Stop (ran: counted executed), and is otherwise
// settled as cleared (counted cleared) once the runtime is known not to
// run it: every cleanup runs exactly once or is counted cleared, and each
// counter is added to once per registration, never taken back.
const (
	cleanupPending uint32 = iota
	cleanupRan
	cleanupStopped
	cleanupCleared

	// cleanupSampled is a flag beside the state: the registration was
	// sampled, and ref is its *stackSample (see sample.go).
	cleanupSampled uint32 = 1 << 8
)

// stopQueue holds the registrations stopped whose fate is not yet known,
// for settleStops. A goroutine settles them while there are any
// (settleLoop): it starts with the first Stop that finds none waiting and
// ends when none is left.
type stopQueue struct {
	mu      sync.Mutex
	pending []*cleanupHeader
	spare   []*cleanupHeader // a slice of an earlier settling, reused
	running bool             // settleLoop runs
}

var stops stopQueue

// add records the stopped registration h, starting settleLoop if it is
// not running. A lock and an append: Stop is not on the registration
// path, and the append allocates only when the slice grows.
func (q *stopQueue) add(h *cleanupHeader) {
	q.mu.Lock()
	q.pending = append(q.pending, h)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go settleLoop()
	}
}

// len returns how many stopped registrations wait to be settled.
func (q *stopQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// settleLoop settles stopped registrations until none is left, looking
// every millisecond at first, then less often while the runtime's cleanup
// queue stays busy (up to every 100 ms: a cleanup that blocks holds the
// queue up for good). It is the one other goroutine finalizerwatch starts,
// as short-lived as the stops it waits on.
func settleLoop() {
	wait := time.Millisecond
	for settleStops(true) > 0 {
		time.Sleep(wait) // polling: the runtime has no way to tell when its queue empties
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// settle serialises settleStops and owns the sample buffer it reads the
// runtime's cleanup queue into (metrics.Read's argument escapes).
var settle struct {
	mu      sync.Mutex
	samples []metrics.Sample
}

// settleStops counts as cleared the stopped registrations whose cleanups
// the runtime will not run, and returns how many are left waiting. It
// ends settleLoop, if loop is true, when none is left.
//
// A stopped cleanup runs only if the runtime had queued it before the
// Stop: the runtime queues a cleanup when it sweeps its dead object, and
// runtime.Cleanup.Stop sweeps the object's span before it looks for the
// cleanup, removing it if it is still there (mcleanup.go), so nothing is
// queued after. And the runtime counts a cleanup executed only once it has
// returned, after it counted it queued ("/gc/cleanups/executed" and
// "/gc/cleanups/queued", read together, executed first, by
// cleanupQueue.readQueueStats). So once a reading taken after the Stops
// finds executed >= queued, every cleanup queued before them has run, and
// a stopped registration that has not will never run. The queue may be
// seen busy for a while (several cleanup goroutines take blocks of it in
// any order, so nothing weaker than an empty queue will do); the stops
// then wait for the next look.
func settleStops(loop bool) int {
	settle.mu.Lock()
	defer settle.mu.Unlock()
	stops.mu.Lock()
	batch := stops.pending
	stops.pending, stops.spare = stops.spare[:0], nil
	stops.mu.Unlock()

	left := batch[:0]
	if len(batch) > 0 {
		if settle.samples == nil {
			settle.samples = []metrics.Sample{{Name: "/gc/cleanups/queued:cleanups"}, {Name: "/gc/cleanups/executed:cleanups"}}
		}
		metrics.Read(settle.samples)
		q, x := settle.samples[0].Value, settle.samples[1].Value
		drained := q.Kind() == metrics.KindUint64 && x.Kind() == metrics.KindUint64 && x.Uint64() >= q.Uint64()
		for _, h := range batch {
			f := h.state.Load() & cleanupSampled
			switch {
			case h.state.Load() != cleanupStopped|f:
				// It ran after the Stop: counted executed.
			case drained && h.state.CompareAndSwap(cleanupStopped|f, cleanupCleared|f):
				s, smp := refSite(h.ref, f != 0), refSample(h.ref, f != 0)
				s.cleared.Add(1)
				if smp != nil {
					smp.cleared.Add(1)
				}
			default:
				left = append(left, h)
			}
		}
	}
	clear(batch[len(left):]) // let the settled records go

	stops.mu.Lock()
	defer stops.mu.Unlock()
	stops.pending = append(stops.pending, left...)
	clear(left)
	stops.spare = batch[:0]
	n := len(stops.pending)
	if loop && n == 0 {
		stops.running = false
	}
	return n
}

type cleanupHeader struct {
	ref   unsafe.Pointer // *site, or *stackSample if sampled (see refSite)
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

// rareRanAfterStop is RanAfterStop's slot in a site's rare table.
var rareRanAfterStop = rareSlot("ran_after_stop")

func (r *cleanupRec[S]) run() {
	f := r.h.state.Load() & cleanupSampled // set before the runtime had r
	s, smp := refSite(r.h.ref, f != 0), refSample(r.h.ref, f != 0)
	start := monoNow()
	slot := s.w.begin(KindCleanup, s, start)
	r.fn(r.arg)
	var d time.Duration
	timed := timed()
	if timed {
		d = time.Duration(monoNow() - start)
	}
	end(slot)
	switch {
	case r.h.state.CompareAndSwap(cleanupPending|f, cleanupRan|f):
		s.executed.Add(1)
		s.done(KindCleanup, r.h.cyc)
	case r.h.state.CompareAndSwap(cleanupStopped|f, cleanupRan|f):
		// Stop came after the runtime had queued the cleanup: it did not
		// stop it. Stop already took it off the outstanding ages, and
		// counted nothing (see settleStops).
		s.executed.Add(1)
		s.addRare(rareRanAfterStop, 1)
	default:
		return // cannot happen: the runtime runs a cleanup once
	}
	if smp != nil {
		smp.executed.Add(1)
	}
	if timed {
		s.dur.observe(d)
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
func addCleanup[T, S any](w *Watcher, ptr *T, cleanup func(S), arg S, pc uintptr) Cleanup {
	const fn = "finalizerwatch.AddCleanup"
	if ptr == nil {
		panic(fn + ": ptr is nil")
	}
	if cleanup == nil {
		panic(fn + ": cleanup is nil")
	}
	if k := reflect.TypeFor[S]().Kind(); k == reflect.Pointer || k == reflect.UnsafePointer {
		a, p := uintptr(*(*unsafe.Pointer)(unsafe.Pointer(&arg))), uintptr(unsafe.Pointer(ptr))
		if a == p {
			panic(fn + ": ptr is equal to arg, cleanup will never run")
		}
		// arg points into *ptr, so into ptr's allocation. The runtime
		// refuses that unless the allocation is a 16-byte pointer-free
		// block, which *ptr, larger, cannot be in.
		if size := unsafe.Sizeof(*ptr); size > 16 && a > p && a-p < size {
			panic(fn + ": ptr is within arg, cleanup will never run")
		}
	}
	w.init()
	s := w.siteFor(KindCleanup, pc, 2)
	if !s.checked.Load() || checkFinalizers() {
		if verifyCleanup(ptr, cleanup, arg) {
			s.checked.Store(true)
		}
	}
	r := &cleanupRec[S]{fn: cleanup, arg: arg}
	// Counted before the runtime call: once AddCleanup returns, ptr may be
	// collected and the cleanup run before this function goes on.
	cyc := w.account(s)
	r.h.cyc = cyc
	var smp *stackSample
	if w.sampleNow() {
		if smp = w.sample(s, 2); smp != nil {
			r.h.state.Store(cleanupPending | cleanupSampled)
		}
	}
	r.h.ref = entryRef(s, smp)
	defer func() {
		if p := recover(); p != nil {
			w.unaccount(s, smp, r.h.cyc)
			panic(renamePanic(fn, p))
		}
	}()
	rc := runtime.AddCleanup(ptr, runCleanup, runner(r))
	if rc == (runtime.Cleanup{}) {
		// The runtime registered nothing (ptr is not a heap object: a
		// global, or a zero-size object): neither does the ledger.
		w.unaccount(s, smp, r.h.cyc)
		return Cleanup{}
	}
	return Cleanup{c: rc, h: &r.h}
}

// verifyCleanup makes the runtime's own checks of AddCleanup's arguments,
// which the watcher's registration would escape: the runtime sees only the
// watcher's record as the argument and runCleanup as the function, so it
// can check neither arg against ptr's allocation (beyond what addCleanup
// checks itself) nor the user's cleanup closure for a reference to ptr, and
// a cleanup that can never run would be registered in silence. It registers
// the user's cleanup with the runtime and stops it at once, so a bad
// argument panics as runtime.AddCleanup does, renamed.
//
// That costs a second registration, so it runs on the first registration at
// each call site (until one passes) and, with GODEBUG=checkfinalizers=1, on
// every registration. A site whose later registrations differ from its
// first in this respect is not checked again.
//
// It reports whether the runtime made its checks: it makes none where it
// registers nothing, for ptr outside the heap (a global, a zero-size
// object: runtime.AddCleanup returns the zero Cleanup when findObject finds
// no span and isGoPointerWithoutSpan, mcleanup.go), before it looks at the
// cleanup closure. Such a registration must not mark its site checked, or
// a later heap registration there whose cleanup closes over ptr would be
// accepted: a cleanup that can never run, where the runtime panics.
func verifyCleanup[T, S any](ptr *T, cleanup func(S), arg S) (checked bool) {
	defer func() {
		if p := recover(); p != nil {
			panic(renamePanic("finalizerwatch.AddCleanup", p))
		}
	}()
	c := runtime.AddCleanup(ptr, cleanup, arg)
	c.Stop()
	runtime.KeepAlive(ptr)
	return c != runtime.Cleanup{}
}

// renamePanic turns the runtime's panic value p into the message of fn's.
func renamePanic(fn string, p any) string {
	msg := fmt.Sprint(p)
	if _, rest, ok := strings.Cut(msg, "runtime.AddCleanup: "); ok {
		msg = rest
	}
	return fn + ": " + msg
}

// checkFinalizers reports whether GODEBUG=checkfinalizers is on: the
// runtime then looks for finalizers and cleanups that can never run, and
// the watcher checks every registration as carefully as the runtime does.
func checkFinalizers() bool {
	checkFinalizersOnce.Do(func() {
		v := ""
		for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
			if val, ok := strings.CutPrefix(kv, "checkfinalizers="); ok {
				v = val // the last setting wins, as in the runtime
			}
		}
		checkFinalizersOn = v != "" && v != "0"
	})
	return checkFinalizersOn
}

var (
	checkFinalizersOnce sync.Once
	checkFinalizersOn   bool
)
