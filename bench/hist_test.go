package bench

import (
	"math"
	"math/bits"
	"runtime/metrics"
	"time"
)

// latencyHist is a log-linear histogram of durations: exact below 256 ns,
// then 128 buckets per power of two, so a quantile read from it is within
// 0.8 % of the true value. It takes a fixed 58 KiB and records without
// allocating or locking, so each worker keeps its own and they are merged
// after the run: recording a latency must not perturb what is measured.
type latencyHist struct {
	counts [latencyBuckets]uint64
	n      uint64
}

const (
	latencySubBits = 7
	latencySub     = 1 << latencySubBits // buckets per power of two
	latencyLinear  = 2 * latencySub      // values below this have a bucket each
	latencyBuckets = latencyLinear + (64-latencySubBits-1)*latencySub
)

func latencyIndex(v uint64) int {
	if v < latencyLinear {
		return int(v)
	}
	shift := bits.Len64(v) - latencySubBits - 1 // v>>shift is in [latencySub, 2*latencySub)
	return latencyLinear + (shift-1)*latencySub + int(v>>shift) - latencySub
}

// latencyBounds returns the values bucket i holds: [lo, lo+width).
func latencyBounds(i int) (lo, width uint64) {
	if i < latencyLinear {
		return uint64(i), 1
	}
	i -= latencyLinear
	shift := i/latencySub + 1
	return uint64(i%latencySub+latencySub) << shift, 1 << shift
}

func (h *latencyHist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[latencyIndex(uint64(d))]++
	h.n++
}

func (h *latencyHist) merge(o *latencyHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1): the middle of the bucket
// holding the ceil(q*n)-th smallest value. NaN when empty.
func (h *latencyHist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := latencyBounds(i)
			return float64(lo) + float64(w-1)/2
		}
	}
	return math.NaN() // unreachable: the counts add up to n
}

// runtimeHist is a delta of one runtime/metrics Float64Histogram, such as
// /sched/pauses/total/gc:seconds.
type runtimeHist struct {
	buckets []float64 // boundaries, len(counts)+1; may start with -Inf and end with +Inf
	counts  []uint64
}

// histDelta returns after - before for two readings of one histogram
// metric.
func histDelta(before, after *metrics.Float64Histogram) runtimeHist {
	d := runtimeHist{buckets: after.Buckets, counts: make([]uint64, len(after.Counts))}
	for i := range after.Counts {
		d.counts[i] = after.Counts[i]
		if i < len(before.Counts) {
			d.counts[i] -= before.Counts[i]
		}
	}
	return d
}

func (h runtimeHist) total() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// quantile returns the upper boundary of the bucket holding the q-quantile
// (the runtime's buckets are about 12 % wide), or its lower boundary if the
// upper one is +Inf; NaN when empty.
func (h runtimeHist) quantile(q float64) float64 {
	n := h.total()
	if n == 0 {
		return math.NaN()
	}
	rank := max(uint64(math.Ceil(q*float64(n))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if hi := h.buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return h.buckets[i]
		}
	}
	return math.NaN()
}

// Runtime metrics the workload reads before and after a run. Reading them
// does not stop the world.
const (
	metricGCPauses    = "/sched/pauses/total/gc:seconds"
	metricOtherPauses = "/sched/pauses/total/other:seconds"
	metricGCCycles    = "/gc/cycles/total:gc-cycles"
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricTotalMemory = "/memory/classes/total:bytes"
	metricReleased    = "/memory/classes/heap/released:bytes"
)

// runtimeReading is one read of the metrics above.
type runtimeReading struct {
	samples []metrics.Sample
}

func readRuntime() runtimeReading {
	r := runtimeReading{samples: []metrics.Sample{
		{Name: metricGCPauses}, {Name: metricOtherPauses}, {Name: metricGCCycles},
		{Name: metricHeapObjects}, {Name: metricTotalMemory}, {Name: metricReleased},
	}}
	metrics.Read(r.samples)
	return r
}

func (r runtimeReading) hist(i int) *metrics.Float64Histogram {
	if r.samples[i].Value.Kind() != metrics.KindFloat64Histogram {
		return &metrics.Float64Histogram{}
	}
	return r.samples[i].Value.Float64Histogram()
}

func (r runtimeReading) uint(i int) uint64 {
	if r.samples[i].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return r.samples[i].Value.Uint64()
}

func (r runtimeReading) gcPauses() *metrics.Float64Histogram    { return r.hist(0) }
func (r runtimeReading) otherPauses() *metrics.Float64Histogram { return r.hist(1) }
func (r runtimeReading) gcCycles() uint64                       { return r.uint(2) }
func (r runtimeReading) heapObjects() uint64                    { return r.uint(3) }

// mappedNotReleased is the memory the runtime holds from the OS and has
// not returned: what the Go runtime contributes to RSS, at most.
func (r runtimeReading) mappedNotReleased() uint64 { return r.uint(4) - r.uint(5) }
