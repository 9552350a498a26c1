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
}

// rateRing computes GCCPUFraction and ForcedPerMinute over a trailing
// window from a fixed array of past points: no allocation.
type rateRing struct {
	pts    [rateRingSize]ratePoint
	next   int
	n      int
	window time.Duration
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
		if p.forced >= b.forced {
			// Divide by at least a window, so that a partial window
			// reports the count so far rather than an extrapolation.
			span := max(p.t.Sub(b.t), r.window)
			forcedPerMinute = float64(p.forced-b.forced) / span.Minutes()
		}
	} else if p.cpuTotal > 0 {
		// First round: the program's lifetime is all there is.
		gcFraction = p.cpuGC / p.cpuTotal
	}
	gcFraction = min(max(gcFraction, 0), 1)

	if r.n == 0 || p.t.Sub(r.at(r.n-1).t) >= r.window/rateSpacing {
		r.pts[r.next] = p
		r.next = (r.next + 1) % rateRingSize
		if r.n < rateRingSize {
			r.n++
		}
	}
	return gcFraction, forcedPerMinute
}
