package memstats

import "time"

// rateRingSize bounds the points kept for the rate window. Points are kept
// at most every window/rateSpacing, so the ring spans two windows whatever
// the sampling frequency (GC cycles can wake the sampler hundreds of times
// a second).
const (
	rateRingSize = 64
	rateSpacing  = rateRingSize / 2
)

// ratePoint is the cumulative counters a windowed rate is a difference of.
type ratePoint struct {
	t               time.Time
	cpuGC, cpuTotal float64
	forced          uint64

	// For Work (cause.go).
	cycles, allocBytes, stwGC uint64
	cpuAssist, cpuDedicated   float64
	cpuIdle, cpuPause         float64
	stwStopSec, stwTotalSec   float64
}

// rateRing computes GCCPUFraction and ForcedPerMinute over a trailing
// window from fixed arrays of past points: no allocation.
type rateRing struct {
	pts    [rateRingSize]ratePoint
	next   int
	n      int
	window time.Duration
	forced forcedRing
}

// forcedRingSize bounds the steps kept for the window, and forcedSpacing
// is how many steps a window holds at most: rounds that saw forced cycles
// closer together share a step, so the ring always spans two windows and
// the count is exact to within window/forcedSpacing (under 1%).
const (
	forcedRingSize = 256
	forcedSpacing  = forcedRingSize / 2
)

// forcedStep is a round that saw the forced-cycle count move: from before
// to the count at t.
type forcedStep struct {
	t      time.Time // the latest round the step took in
	first  time.Time // the first
	before uint64
}

// forcedRing counts forced GC cycles over a sliding window exactly, to the
// round that observed them: the rounds where the count moved are kept, so
// the window's count is the current count minus the count before the
// oldest such round inside the window. (Differencing against a point kept
// every window/32, as GCCPUFraction does, spans up to 1/32 more than the
// window and let exactly 5 forced cycles in a minute read 4.9 a minute.)
type forcedRing struct {
	steps [forcedRingSize]forcedStep
	next  int
	n     int
	last  uint64 // count at the previous round
	seen  bool   // a round was observed
}

// observe records the count at t and returns how many forced cycles the
// rounds in (t-window, t] observed.
func (f *forcedRing) observe(t time.Time, count uint64, window time.Duration) uint64 {
	if f.seen && count > f.last {
		if newest := &f.steps[(f.next-1+forcedRingSize)%forcedRingSize]; f.n > 0 && t.Sub(newest.first) < window/forcedSpacing {
			// Rounds closer than window/forcedSpacing share a step: a
			// runtime.GC loop wakes the sampler every cycle, and a
			// step a round would fill the ring in a fraction of the
			// window. The count may then take in up to
			// window/forcedSpacing before the window's start.
			newest.t = t
		} else {
			f.steps[f.next] = forcedStep{t: t, first: t, before: f.last}
			f.next = (f.next + 1) % forcedRingSize
			if f.n < forcedRingSize {
				f.n++
			}
		}
	} else if count < f.last {
		f.n = 0 // the count went back: a different source; start over
	}
	f.last, f.seen = count, true
	cut := t.Add(-window)
	start := f.next - f.n
	if start < 0 {
		start += forcedRingSize
	}
	for i := 0; i < f.n; i++ {
		st := &f.steps[(start+i)%forcedRingSize]
		if st.t.After(cut) {
			return count - st.before
		}
	}
	return 0
}

func (r *rateRing) at(i int) *ratePoint { // i-th oldest
	start := r.next - r.n
	if start < 0 {
		start += rateRingSize
	}
	return &r.pts[(start+i)%rateRingSize]
}

// base returns the point the current one is compared with: the newest at
// least a window old, or, while less than a window has been observed, the
// oldest.
func (r *rateRing) base(now time.Time) *ratePoint {
	if r.n == 0 {
		return nil
	}
	cut := now.Add(-r.window)
	for i := r.n - 1; i >= 0; i-- {
		if p := r.at(i); !p.t.After(cut) {
			return p
		}
	}
	return r.at(0)
}

// observe returns the windowed GC CPU fraction and forced cycles per minute
// at p, and keeps p if the newest point kept is old enough.
func (r *rateRing) observe(p ratePoint) (gcFraction, forcedPerMinute float64) {
	if b := r.base(p.t); b != nil {
		if d := p.cpuTotal - b.cpuTotal; d > 0 {
			gcFraction = (p.cpuGC - b.cpuGC) / d
		}
	} else if p.cpuTotal > 0 {
		// First round: the program's lifetime is all there is.
		gcFraction = p.cpuGC / p.cpuTotal
	}
	gcFraction = min(max(gcFraction, 0), 1)
	// The count over exactly the window, per minute: while less than a
	// window has been observed, the count so far, never an extrapolation.
	forcedPerMinute = float64(r.forced.observe(p.t, p.forced, r.window)) / r.window.Minutes()

	if r.n == 0 || p.t.Sub(r.at(r.n-1).t) >= r.window/rateSpacing {
		r.pts[r.next] = p
		r.next = (r.next + 1) % rateRingSize
		if r.n < rateRingSize {
			r.n++
		}
	}
	return gcFraction, forcedPerMinute
}
