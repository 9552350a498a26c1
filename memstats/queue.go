package memstats

import "time"

// The runtime runs finalizers on one goroutine: it takes the whole queue
// as a batch and walks it from its end, block by block, and counts a
// block's finalizers as executed only once the whole block (about a hundred
// finalizers) has run; cleanups go the same way, block by block. A sentinel
// queued after a backlog can therefore run before it, and report a tiny
// latency while thousands wait. So the queue delay is estimated from the
// queue itself as well: its length over the rate at which it drained
// recently, while it was not empty. That estimate does not care in which
// order the runtime drains.

// queueRingSize bounds the points kept per queue for the queue window.
// Points are kept at most every window/queueSpacing, so the ring spans
// two windows whatever the sampling frequency.
const (
	queueRingSize = 64
	queueSpacing  = queueRingSize / 2

	// minDrainSpan is the least time a drain rate is measured over:
	// rounds a GC cycle triggers can be a millisecond apart, and the
	// runtime counts executions a block at a time.
	minDrainSpan = 100 * time.Millisecond
)

// queuePoint is one round's cumulative counts of one queue.
type queuePoint struct {
	t                time.Time
	queued, executed uint64
}

// queueTrack follows one queue (finalizers or cleanups) across rounds. It
// is part of the sampler's round, guarded by the sampler's mutex.
type queueTrack struct {
	pts  [queueRingSize]queuePoint
	next int
	n    int

	// The current busy period: rounds that all saw the queue non-empty.
	busy        bool
	busyStart   queuePoint // the first round of the period
	lastExec    uint64     // executed count at the previous round
	lastAdvance time.Time  // when executed last moved during the period

	// sentRuns is the sentinel run count whose latency is still relevant;
	// sentStale is set once the queue was seen empty after that run: the
	// finished sentinel's latency then describes a backlog that is gone.
	sentRuns  uint64
	sentStale bool
}

// queueEstimate is what observe derives for one queue at one round.
type queueEstimate struct {
	drain, fill float64       // per second; see Queue
	backlog     time.Duration // see Queue.Backlog
	busyFor     time.Duration // how long the queue has been non-empty
	drained     uint64        // executions in the busy part of the window
	rateOK      bool          // drain was measured over at least minDrainSpan
}

func (q *queueTrack) at(i int) *queuePoint { // i-th oldest
	start := q.next - q.n
	if start < 0 {
		start += queueRingSize
	}
	return &q.pts[(start+i)%queueRingSize]
}

// oldestSince returns the oldest kept point at or after cut, or nil.
func (q *queueTrack) oldestSince(cut time.Time) *queuePoint {
	for i := 0; i < q.n; i++ {
		if p := q.at(i); !p.t.Before(cut) {
			return p
		}
	}
	return nil
}

// observe takes the round's counts at now and returns the estimate. window
// is the queue window (WithQueueWindow).
func (q *queueTrack) observe(now time.Time, queued, executed uint64, window time.Duration) queueEstimate {
	var e queueEstimate
	length := sub0(queued, executed)
	cur := queuePoint{t: now, queued: queued, executed: executed}
	cut := now.Add(-window)

	// Fill rate: everything queued over the window, divided by the
	// whole window even while less has been observed (the count so far,
	// never an extrapolation).
	if p := q.oldestSince(cut); p != nil && queued >= p.queued {
		e.fill = float64(queued-p.queued) / window.Seconds()
	}

	switch {
	case length == 0:
		q.busy = false
		q.sentStale = true
	case !q.busy:
		// The period begins now: nothing is known of its drain rate
		// yet, and the idle time before it says nothing about it.
		q.busy = true
		q.busyStart = cur
		q.lastExec, q.lastAdvance = executed, now
	default:
		if executed != q.lastExec {
			q.lastExec, q.lastAdvance = executed, now
		}
		// Drain rate over the busy part of the window: from the start
		// of the period, or from the oldest point in the window when
		// the period is older than that.
		base := &q.busyStart
		if base.t.Before(cut) {
			if p := q.oldestSince(cut); p != nil {
				base = p
			}
		}
		e.busyFor = now.Sub(q.busyStart.t)
		if executed >= base.executed {
			e.drained = executed - base.executed
			if span := now.Sub(base.t); span >= minDrainSpan {
				e.drain = float64(e.drained) / span.Seconds()
				e.rateOK = true
			}
		}
		// A callback queued now waits for the length at the drain
		// rate; and for at least as long as the queue has not moved
		// when it stands still (a blocked finalizer, or a block of
		// slow ones not yet counted).
		if e.drain > 0 {
			e.backlog = time.Duration(float64(length) / e.drain * float64(time.Second))
		}
		e.backlog = max(e.backlog, now.Sub(q.lastAdvance))
	}

	if q.n == 0 || now.Sub(q.at(q.n-1).t) >= window/queueSpacing {
		q.pts[q.next] = cur
		q.next = (q.next + 1) % queueRingSize
		if q.n < queueRingSize {
			q.n++
		}
	}
	return e
}

// sentinel returns the part of the sentinel's latency that still describes
// the queue: an overdue sentinel always does; a finished one only until the
// queue has been seen empty after it ran. runs is the chain's run count.
func (q *queueTrack) sentinel(lat time.Duration, overdue bool, runs uint64) time.Duration {
	if overdue {
		return lat
	}
	if runs != q.sentRuns {
		q.sentRuns, q.sentStale = runs, false
	}
	if q.sentStale {
		return 0
	}
	return lat
}

// queues fills the round's queue fields of sn from reading r and keeps this
// round's estimates for the detectors.
func (d *detectors) queues(now time.Time, r *reading, sn *Snapshot) {
	// The sentinels first: a run seen this round is relevant until the
	// queue is seen empty, which observe may note this very round.
	finSent := d.finQ.sentinel(r.finLatency, r.finPending, r.finRuns)
	clnSent := d.clnQ.sentinel(r.clnLatency, r.clnPending, r.clnRuns)
	w := d.cfg.queueWindow
	d.finEst = d.finQ.observe(now, r.finQueued, r.finExecuted, w)
	d.clnEst = d.clnQ.observe(now, r.clnQueued, r.clnExecuted, w)
	if d.finQ.sentStale {
		finSent = d.finQ.sentinel(r.finLatency, r.finPending, r.finRuns)
	}
	if d.clnQ.sentStale {
		clnSent = d.clnQ.sentinel(r.clnLatency, r.clnPending, r.clnRuns)
	}
	sn.Finalizers = queueOf(r.finQueued, r.finExecuted, &d.finEst, r.finLatency, finSent)
	sn.Cleanups = queueOf(r.clnQueued, r.clnExecuted, &d.clnEst, r.clnLatency, clnSent)
}

func queueOf(queued, executed uint64, e *queueEstimate, sentinel, relevant time.Duration) Queue {
	return Queue{
		Queued:          queued,
		Executed:        executed,
		Length:          sub0(queued, executed),
		Latency:         max(e.backlog, relevant),
		SentinelLatency: sentinel,
		Backlog:         e.backlog,
		DrainPerSecond:  e.drain,
		FillPerSecond:   e.fill,
	}
}
