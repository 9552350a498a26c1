package memstats

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/internal/gcclock"
)

// The sampler learns of GC cycles from the process's one GC-cycle clock
// (internal/gcclock): a chain of sentinel objects with a finalizer and one
// with a cleanup, shared with finalizerwatch. Each tick of a chain records
// the time, wakes the sampler, and the chain's next sentinel is pending
// from then on.

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
// subscription to the GC-cycle clock. The clock references this state,
// never the Sampler, so a subscription does not keep the Sampler reachable.
type sentinelState struct {
	clock   Clock
	stopped atomic.Bool
	wake    chan struct{} // capacity 1: a wake-up already pending absorbs others
	drops   atomic.Uint64 // wake-ups dropped because one was already pending

	fin track
	cln track

	sub *gcclock.Subscription // set by start

	// runs counts the runs of both chains for the Sampler (SentinelRuns):
	// [0] finalizers, [1] cleanups.
	runs *[2]atomic.Uint64
}

func newSentinelState(c Clock, runs *[2]atomic.Uint64) *sentinelState {
	return &sentinelState{clock: c, wake: make(chan struct{}, 1), runs: runs}
}

// start subscribes to the clock. The chains' pending sentinels count as
// armed now: a cycle that ended before cannot be told apart from one that
// queued them, so the first latency measured is a lower bound (see
// latencyState.update).
func (st *sentinelState) start() {
	now := st.clock.Now().UnixNano()
	st.fin.setPending(now)
	st.cln.setPending(now)
	st.fin.arms.Add(1)
	st.cln.arms.Add(1)
	st.sub = gcclock.Subscribe(st)
}

// stop ends the subscription: no tick reaches the state after it but one
// already under way, which sees stopped and records nothing.
func (st *sentinelState) stop() {
	st.stopped.Store(true)
	if st.sub != nil {
		st.sub.Cancel()
	}
}

// Tick runs on the runtime's finalizer goroutine (k gcclock.Finalizer),
// which runs every finalizer of the program one after another, or on a
// cleanup goroutine: it must not block. It does a few atomic stores and a
// non-blocking send. The chain's next sentinel, armed by the clock, is
// pending from now.
func (st *sentinelState) Tick(k gcclock.Kind) bool {
	if st.stopped.Load() {
		return false
	}
	now := st.clock.Now().UnixNano()
	t, i := &st.fin, 0
	if k == gcclock.Cleanup {
		t, i = &st.cln, 1
	}
	// Only ticks write the track, one at a time per chain: pending is
	// the arm time of the sentinel that just ran.
	t.record(t.pending.Load(), now, true)
	t.arms.Add(1)
	st.runs[i].Add(1)
	st.notify()
	return true
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
