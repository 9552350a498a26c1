package bench

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

func TestLatencyIndex(t *testing.T) {
	// Every value falls in the bucket whose bounds hold it, and buckets
	// are contiguous and ordered.
	vals := []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 4095, 4096, 1e6, 123456789, 1 << 40, math.MaxUint64}
	for v := uint64(1); v < 1<<20; v = v*3/2 + 1 {
		vals = append(vals, v, v-1, v+1)
	}
	for _, v := range vals {
		i := latencyIndex(v)
		if i < 0 || i >= latencyBuckets {
			t.Fatalf("latencyIndex(%d) = %d, outside [0, %d)", v, i, latencyBuckets)
		}
		lo, w := latencyBounds(i)
		if v < lo || v-lo >= w {
			t.Errorf("latencyIndex(%d) = %d, whose bounds [%d, %d+%d) do not hold it", v, i, lo, lo, w)
		}
		if w > 1 && float64(w)/float64(lo) > 1.0/latencySub+1e-12 {
			t.Errorf("bucket %d: width %d over %d, wider than 1/%d", i, w, lo, latencySub)
		}
	}
	for i := 1; i < latencyBuckets; i++ {
		plo, pw := latencyBounds(i - 1)
		lo, _ := latencyBounds(i)
		if plo+pw != lo {
			t.Fatalf("buckets %d and %d are not contiguous: %d+%d != %d", i-1, i, plo, pw, lo)
		}
	}
}

func TestLatencyQuantile(t *testing.T) {
	var h latencyHist
	if !math.IsNaN(h.quantile(0.5)) {
		t.Error("quantile of an empty histogram is not NaN")
	}
	// 1..1000 µs: the p50 is 500 µs, the p99 990 µs, within a bucket.
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want float64
	}{{0.5, 500e3}, {0.99, 990e3}, {1, 1000e3}, {0.001, 1e3}} {
		if got := h.quantile(tt.q); math.Abs(got-tt.want)/tt.want > 1.0/latencySub {
			t.Errorf("quantile(%v) = %v, want %v within %.2f%%", tt.q, got, tt.want, 100.0/latencySub)
		}
	}
	var m latencyHist
	m.merge(&h)
	m.merge(&h)
	if m.n != 2000 || m.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merged twice: n = %d, p50 = %v; want 2000, %v", m.n, m.quantile(0.5), h.quantile(0.5))
	}
}

func TestRuntimeHist(t *testing.T) {
	before := &metrics.Float64Histogram{Counts: []uint64{1, 1, 0, 0}, Buckets: []float64{math.Inf(-1), 1, 2, 3, math.Inf(1)}}
	after := &metrics.Float64Histogram{Counts: []uint64{1, 99, 1, 2}, Buckets: before.Buckets}
	d := histDelta(before, after)
	if d.total() != 101 {
		t.Fatalf("delta total = %d, want 101", d.total())
	}
	// Deltas: 0 below 1, 98 in [1, 2), 1 in [2, 3), 2 at 3 or more; a
	// quantile reads as its bucket's upper bound, or the lower one of the
	// last, unbounded bucket.
	for _, tt := range []struct{ q, want float64 }{{0.5, 2}, {0.97, 2}, {0.98, 3}, {0.99, 3}, {1, 3}} {
		if got := d.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (runtimeHist{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty quantile = %v, want NaN", got)
	}
}
