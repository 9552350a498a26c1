package memstats

import (
	"slices"
	"sort"
	"time"
)

// PauseBuckets are the default upper bounds, in seconds, of the buckets of
// Snapshot.PauseHistogram: 10µs to 1s in 1-2.5-5 steps. New copies them, so
// changing this variable affects only samplers created afterwards; prefer
// WithPauseBuckets.
var PauseBuckets = []float64{
	10e-6, 25e-6, 50e-6,
	100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3,
	10e-3, 25e-3, 50e-3,
	100e-3, 250e-3, 500e-3,
	1,
}

// Pause is one GC cycle's stop-the-world time, as debug.ReadGCStats
// reports it: the sum of the cycle's sweep-termination and
// mark-termination pauses, ending at End.
type Pause struct {
	// Cycle is the cycle's number: 1 for the program's first GC cycle.
	Cycle uint64
	// End is when the cycle's last pause ended.
	End time.Time
	// Duration is the cycle's total stop-the-world time.
	Duration time.Duration
}

// Histogram is a cumulative distribution of per-cycle GC pauses since the
// sampler started, shaped for a Prometheus histogram
// (gcprobe_gc_pause_seconds).
type Histogram struct {
	// Bounds are the buckets' upper bounds in seconds, increasing.
	Bounds []float64
	// Counts are per bucket, not cumulative: Counts[i] counts pauses d
	// with Bounds[i-1] < d <= Bounds[i]; the last, Counts[len(Bounds)],
	// counts those above every bound (+Inf).
	Counts []uint64
	// Count is the number of pauses observed, the sum of Counts.
	Count uint64
	// Sum is their total in seconds.
	Sum float64
}

// copyInto copies h into dst, reusing dst's slices when they are large
// enough.
func (h *Histogram) copyInto(dst *Histogram) {
	dst.Bounds = append(dst.Bounds[:0], h.Bounds...)
	dst.Counts = append(dst.Counts[:0], h.Counts...)
	dst.Count = h.Count
	dst.Sum = h.Sum
}

func (h *Histogram) observe(d time.Duration) {
	s := d.Seconds()
	// SearchFloat64s finds the first bound >= s, which is the bucket
	// "le" that bound; past every bound it returns len(Bounds), the +Inf
	// bucket.
	h.Counts[sort.SearchFloat64s(h.Bounds, s)]++
	h.Count++
	h.Sum += s
}

// pauseRing is the bounded pause history: a ring of the latest cycles,
// plus a scratch buffer for the window's quantiles so that computing them
// allocates nothing.
type pauseRing struct {
	buf     []Pause // len(buf) == capacity
	next    int     // where the next pause goes
	n       int     // how many are filled
	window  int
	scratch []time.Duration
	dirty   bool // pauses arrived since the quantiles were computed
	p50     time.Duration
	p99     time.Duration
	max     time.Duration
}

func newPauseRing(history, window int) pauseRing {
	return pauseRing{
		buf:     make([]Pause, history),
		window:  window,
		scratch: make([]time.Duration, 0, window),
	}
}

func (r *pauseRing) push(p Pause) {
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	if r.n < len(r.buf) {
		r.n++
	}
	r.dirty = true
}

// at returns the i-th oldest pause kept, 0 <= i < r.n.
func (r *pauseRing) at(i int) *Pause {
	start := r.next - r.n
	if start < 0 {
		start += len(r.buf)
	}
	return &r.buf[(start+i)%len(r.buf)]
}

// last returns the latest pause kept, or nil.
func (r *pauseRing) last() *Pause {
	if r.n == 0 {
		return nil
	}
	return r.at(r.n - 1)
}

// appendSince appends the pauses of cycles after cycle, oldest first.
func (r *pauseRing) appendSince(dst []Pause, cycle uint64) []Pause {
	// Cycles are pushed in increasing order, so the first match starts
	// the run to append; search from the newest end, since callers
	// usually ask for the few latest.
	i := r.n
	for i > 0 && r.at(i-1).Cycle > cycle {
		i--
	}
	for ; i < r.n; i++ {
		dst = append(dst, *r.at(i))
	}
	return dst
}

// quantiles returns the median, 99th percentile and maximum of the latest
// window pauses (nearest rank), sorting only when new pauses arrived.
func (r *pauseRing) quantiles() (p50, p99, max time.Duration) {
	if !r.dirty {
		return r.p50, r.p99, r.max
	}
	r.dirty = false
	n := min(r.n, r.window)
	r.scratch = r.scratch[:0]
	for i := r.n - n; i < r.n; i++ {
		r.scratch = append(r.scratch, r.at(i).Duration)
	}
	if n == 0 {
		r.p50, r.p99, r.max = 0, 0, 0
		return 0, 0, 0
	}
	slices.Sort(r.scratch)
	r.p50 = r.scratch[rank(n, 50)]
	r.p99 = r.scratch[rank(n, 99)]
	r.max = r.scratch[n-1]
	return r.p50, r.p99, r.max
}

// rank is the nearest-rank index of the pct-th percentile of n values:
// ceil(pct/100 * n) - 1.
func rank(n, pct int) int {
	return (pct*n+99)/100 - 1
}
