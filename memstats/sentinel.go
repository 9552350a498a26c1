package memstats

import (
	"runtime"
	"sync/atomic"
	"time"
	"weak"
)

// sentinel is the object whose finalizer (or cleanup) tells the sampler
// that a GC cycle has passed: it is allocated unreachable, so the next
// cycle queues its finalizer, which records the time, wakes the sampler and
// arms a new sentinel.
//
// The pointer field matters: the runtime's tiny allocator packs pointer-free
// objects under 16 bytes together, and a finalizer or cleanup on such an
// object may run late or never (runtime.SetFinalizer's documentation). A
// type with a pointer is never tiny-allocated. It is 16 bytes.
type sentinel struct {
	armed int64 // clock time, unix ns, when this sentinel was armed
	_     *byte
}

// track is what one sentinel chain (finalizer or cleanup) has observed. It
// is written only by the chain's callback, one sentinel at a time (each
// sentinel is armed by the previous one's callback, so writes are ordered),
// and read by the sampler. A sequence lock keeps the fields consistent
// with each other without making the callback take a lock.
type track struct {
	seq     atomic.Uint64 // odd while the writer is updating the fields below
	armed   atomic.Int64  // arm time of the sentinel that ran last
	ran     atomic.Int64  // when that sentinel ran
	pending atomic.Int64  // arm time of the sentinel waiting now; 0 if none
	runs    atomic.Uint64 // sentinels that ran

	arms atomic.Uint64 // sentinels armed; for tests
}

// trackView is a consistent copy of a track.
type trackView struct {
	armed, ran, pending int64
	runs                uint64
}

// setPending records the arming of a chain's first sentinel.
func (t *track) setPending(armed int64) {
	t.seq.Add(1)
	t.pending.Store(armed)
	t.seq.Add(1)
}

// record notes that the sentinel armed at armed ran at ran; when rearm is
// set, a new sentinel armed at ran is now pending.
func (t *track) record(armed, ran int64, rearm bool) {
	t.seq.Add(1)
	t.armed.Store(armed)
	t.ran.Store(ran)
	t.runs.Add(1)
	if rearm {
		t.pending.Store(ran)
	} else {
		t.pending.Store(0)
	}
	t.seq.Add(1)
}

// load returns a consistent view. The writer holds the sequence odd for a
// few stores only; if it was preempted there, yield rather than spin.
func (t *track) load() trackView {
	for i := 0; ; i++ {
		s := t.seq.Load()
		if s&1 == 0 {
			v := trackView{
				armed:   t.armed.Load(),
				ran:     t.ran.Load(),
				pending: t.pending.Load(),
				runs:    t.runs.Load(),
			}
			if t.seq.Load() == s {
				return v
			}
		}
		if i >= 4 {
			runtime.Gosched()
		}
	}
}

// sentinelState is shared by one run of the sampler (Start or Run) and its
// two sentinel chains. The callbacks reference this state, never the
// Sampler, so a pending sentinel does not keep the Sampler reachable.
type sentinelState struct {
	clock   Clock
	stopped atomic.Bool
	wake    chan struct{} // capacity 1: a wake-up already pending absorbs others
	drops   atomic.Uint64 // wake-ups dropped because one was already pending

	fin track
	cln track

	// The sentinels waiting now, so that stop can disarm them: a weak
	// pointer for the finalizer (a strong one would keep the sentinel
	// alive forever), the handle for the cleanup.
	finObj atomic.Pointer[weak.Pointer[sentinel]]
	clnObj atomic.Pointer[runtime.Cleanup]

	// runs counts the runs of both chains for the Sampler (SentinelRuns):
	// [0] finalizers, [1] cleanups.
	runs *[2]atomic.Uint64

	// The callbacks as func values, built once rather than per arming.
	onFin func(*sentinel)
	onCln func(int64)
}

func newSentinelState(c Clock, runs *[2]atomic.Uint64) *sentinelState {
	st := &sentinelState{clock: c, wake: make(chan struct{}, 1), runs: runs}
	st.onFin = st.finalized
	st.onCln = st.cleaned
	return st
}

// start arms the first sentinel of each chain.
func (st *sentinelState) start() {
	now := st.clock.Now().UnixNano()
	st.fin.setPending(now)
	st.armFinalizer(now)
	st.cln.setPending(now)
	st.armCleanup(now)
}

// stop ends both chains: no callback re-arms after it, and the sentinels
// waiting now are disarmed. A callback already queued by the runtime still
// runs once, sees stopped and does not re-arm.
func (st *sentinelState) stop() {
	st.stopped.Store(true)
	st.disarmFinalizer()
	if c := st.clnObj.Load(); c != nil {
		c.Stop()
	}
}

func (st *sentinelState) armFinalizer(now int64) {
	s := &sentinel{armed: now}
	runtime.SetFinalizer(s, st.onFin)
	wp := weak.Make(s)
	st.finObj.Store(&wp)
	st.fin.arms.Add(1)
	// stop may have run between the caller's check and the Store above,
	// reading the previous sentinel: check again so that this one does
	// not outlive it. Disarming twice is harmless.
	if st.stopped.Load() {
		st.disarmFinalizer()
	}
}

func (st *sentinelState) disarmFinalizer() {
	if wp := st.finObj.Load(); wp != nil {
		// Value is nil once the sentinel is unreachable, and its
		// finalizer queued: that one will run and not re-arm.
		if s := wp.Value(); s != nil {
			runtime.SetFinalizer(s, nil)
		}
	}
}

func (st *sentinelState) armCleanup(now int64) {
	s := &sentinel{armed: now}
	// The argument is the arm time, not s: a cleanup whose argument
	// references its object never runs.
	c := runtime.AddCleanup(s, st.onCln, now)
	st.clnObj.Store(&c)
	st.cln.arms.Add(1)
	if st.stopped.Load() { // see armFinalizer
		c.Stop()
	}
}

// finalized runs on the runtime's finalizer goroutine, which runs every
// finalizer of the program one after another: it must not block. It does
// a few atomic stores, a non-blocking send and two small allocations.
func (st *sentinelState) finalized(s *sentinel) {
	now := st.clock.Now().UnixNano()
	rearm := !st.stopped.Load()
	st.fin.record(s.armed, now, rearm)
	st.runs[0].Add(1)
	st.notify()
	if rearm {
		st.armFinalizer(now)
	}
}

// cleaned is finalized for the cleanup chain, on a cleanup goroutine.
func (st *sentinelState) cleaned(armed int64) {
	now := st.clock.Now().UnixNano()
	rearm := !st.stopped.Load()
	st.cln.record(armed, now, rearm)
	st.runs[1].Add(1)
	st.notify()
	if rearm {
		st.armCleanup(now)
	}
}

// notify wakes the sampler goroutine without ever blocking: if a wake-up
// is already pending, the sampler will see this cycle's data anyway, so the
// send is dropped and counted.
func (st *sentinelState) notify() {
	select {
	case st.wake <- struct{}{}:
	default:
		st.drops.Add(1)
	}
}

// latencyState follows one sentinel chain from the sampler's side.
type latencyState struct {
	seenRuns uint64
	last     time.Duration // latency of the latest sentinel run
}

// update returns the queue latency to report at now (unix ns) given the
// chain's view and the end times of the latest GC cycles, most recent first
// (debug.GCStats.PauseEnd); overdue reports that the waiting sentinel is
// late and the latency is how late it is.
//
// Which cycle queued a sentinel is not known exactly. A sentinel armed at A
// is unreachable from A on; the first cycle to end after A may have begun
// before A (the sentinel was then allocated black and survives it), but the
// second began after the first ended, so it queued the sentinel for sure.
// Both the finished and the overdue latencies are therefore measured from
// the second cycle ending after A when there is one, else from the first:
// a lower bound, off by at most one GC period, that never reports a
// sentinel overdue when it merely waits for its cycle.
func (l *latencyState) update(v trackView, ends []time.Time, now int64) (lat time.Duration, overdue bool) {
	if v.runs != l.seenRuns {
		l.seenRuns = v.runs
		l.last = 0
		if e, n := queuedBy(ends, v.armed, v.ran); n > 0 && v.ran > e {
			l.last = time.Duration(v.ran - e)
		}
	}
	lat = l.last
	if v.pending != 0 {
		// Overdue only once the second cycle ended: the first may
		// have begun before the sentinel was armed.
		if e, n := queuedBy(ends, v.pending, now); n >= 2 && now > e {
			if d := time.Duration(now - e); d > lat {
				lat, overdue = d, true
			}
		}
	}
	return lat, overdue
}

// queuedBy looks at the cycles ending in (armed, before] and returns how
// many there are (counting up to 2) and the end of the one that certainly
// queued a sentinel armed at armed: the second oldest of them, or the only
// one.
func queuedBy(ends []time.Time, armed, before int64) (end int64, cycles int) {
	var oldest, second int64
	found := 0
	// ends is most recent first: skip those after before, then walk
	// back while they are after armed.
	for i := range ends {
		e := ends[i].UnixNano()
		if e > before {
			continue
		}
		if e <= armed {
			break
		}
		second, oldest = oldest, e
		found++
	}
	switch found {
	case 0:
		return 0, 0
	case 1:
		return oldest, 1
	}
	return second, 2
}
