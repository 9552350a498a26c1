package memstats

import (
	"math"
	"time"
)

// The live heap over time, for live_heap_growth. The runtime reports the
// live heap as of the latest completed cycle (/gc/heap/live: what the mark
// found reachable), so the track keeps a point at the end of a cycle, at
// most every rateWindow/liveSpacing: at hundreds of cycles a second the
// points span the window all the same, and at one cycle a minute every
// cycle is a point. Judging growth over the window in time, not over the
// latest few cycles, is what keeps a program that runs 50 cycles a second
// from judging its growth over a tenth of a second, where a sawtooth
// rises and falls many times a minute.

const (
	liveRingSize = 128
	liveSpacing  = 32
	liveSegments = 4
)

type livePoint struct {
	t     time.Time
	live  uint64
	cycle uint64
}

// liveTrack is a ring of the live heap at cycle ends; part of the sampler's
// round, guarded by its mutex.
type liveTrack struct {
	pts       [liveRingSize]livePoint
	next, n   int
	lastCycle uint64
}

func (l *liveTrack) at(i int) *livePoint { // i-th oldest
	return &l.pts[(l.next-l.n+i+2*liveRingSize)%liveRingSize]
}

// observe keeps a point when a cycle has ended since the previous round,
// and fills the live-heap fields of wk over the span the window and the
// cycles decide (see Work.LiveGrowth).
func (l *liveTrack) observe(now time.Time, r *reading, window time.Duration, cycles int, wk *Work) {
	if r.cycles != l.lastCycle && r.cycles > 0 {
		l.lastCycle = r.cycles
		p := livePoint{t: now, live: r.heapLive, cycle: r.cycles}
		if l.n >= 2 && now.Sub(l.at(l.n-2).t) < window/liveSpacing {
			// The newest point moves on until it is far enough from
			// the one before it: the points stay spaced, and the
			// newest is always the latest cycle.
			*l.at(l.n - 1) = p
		} else {
			l.pts[l.next] = p
			l.next = (l.next + 1) % liveRingSize
			l.n = min(l.n+1, liveRingSize)
		}
	}
	wk.LiveCycles, wk.LiveSpan, wk.LiveGrowth, wk.LiveRising = 0, 0, 0, false
	if l.n < 2 {
		return
	}
	last := l.at(l.n - 1)
	// The oldest point within the window...
	b := l.n - 1
	for i := 0; i < l.n-1; i++ {
		if now.Sub(l.at(i).t) <= window {
			b = i
			break
		}
	}
	// ...or, when too few cycles ended in it, the newest one that many
	// cycles back (a program that collects once a minute).
	if last.cycle-l.at(b).cycle < uint64(cycles) {
		for i := b - 1; i >= 0; i-- {
			if last.cycle-l.at(i).cycle >= uint64(cycles) {
				b = i
				break
			}
		}
	}
	if b == l.n-1 {
		return
	}
	first := l.at(b)
	wk.LiveCycles = int(min(last.cycle-first.cycle, 1<<30))
	wk.LiveSpan = last.t.Sub(first.t)
	// The live heap the runtime reports carries what was allocated while
	// marking (allocated black: kept for that cycle), so at gigabytes a
	// second one cycle's figure may sit 10% above the next. That noise
	// only adds: the low points are the heap the program keeps. The span
	// is cut in liveSegments parts, and it rises when each part's lowest
	// point is above the one before (a 2% dip allowed); the growth is
	// from the first part's lowest to the last's.
	pts := l.n - b
	segs := min(pts, liveSegments)
	var lows [liveSegments]float64
	for k := range segs {
		lo := math.Inf(1)
		for i := b + k*pts/segs; i < b+(k+1)*pts/segs; i++ {
			lo = min(lo, float64(l.at(i).live))
		}
		lows[k] = lo
	}
	if lows[0] > 0 {
		wk.LiveGrowth = (lows[segs-1] - lows[0]) / lows[0]
	}
	rising := lows[segs-1] > lows[0]
	for k := 1; k < segs; k++ {
		if lows[k] < lows[k-1]*(1-liveDip) {
			rising = false
		}
	}
	wk.LiveRising = rising
}
