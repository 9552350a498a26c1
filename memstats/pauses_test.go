package memstats

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestPauseRing(t *testing.T) {
	r := newPauseRing(4, 4)
	if got := r.appendSince(nil, 0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for c := uint64(1); c <= 6; c++ {
		r.push(Pause{Cycle: c, Duration: time.Duration(c)})
	}
	cycles := func(ps []Pause) []uint64 {
		var cs []uint64
		for _, p := range ps {
			cs = append(cs, p.Cycle)
		}
		return cs
	}
	tests := []struct {
		name string
		give uint64
		want []uint64
	}{
		{"all", 0, []uint64{3, 4, 5, 6}},
		{"since forgotten cycle", 2, []uint64{3, 4, 5, 6}},
		{"since kept cycle", 4, []uint64{5, 6}},
		{"since latest", 6, nil},
		{"since future", 100, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []Pause{{Cycle: 99}}
			got := r.appendSince(prefix, tt.give)
			if got[0].Cycle != 99 {
				t.Fatal("dst prefix overwritten")
			}
			if !slices.Equal(cycles(got[1:]), tt.want) {
				t.Fatalf("appendSince(%d) = %v, want %v", tt.give, cycles(got[1:]), tt.want)
			}
		})
	}
	if l := r.last(); l == nil || l.Cycle != 6 {
		t.Fatalf("last = %v", l)
	}
}

func TestPauseQuantiles(t *testing.T) {
	tests := []struct {
		name          string
		window        int
		give          []time.Duration // pushed in order
		p50, p99, max time.Duration
	}{
		{"empty", 10, nil, 0, 0, 0},
		{"one", 10, []time.Duration{7}, 7, 7, 7},
		{"two", 10, []time.Duration{9, 1}, 1, 9, 9},
		{"hundred", 100, seq(100), 50, 99, 100},
		{"window keeps latest", 3, []time.Duration{1000, 1, 2, 3}, 2, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPauseRing(100, tt.window)
			for i, d := range tt.give {
				r.push(Pause{Cycle: uint64(i + 1), Duration: d})
			}
			p50, p99, max := r.quantiles()
			if p50 != tt.p50 || p99 != tt.p99 || max != tt.max {
				t.Fatalf("quantiles = %v %v %v, want %v %v %v", p50, p99, max, tt.p50, tt.p99, tt.max)
			}
		})
	}
}

func seq(n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = time.Duration(n - i) // reversed, so sorting matters
	}
	return d
}

func TestHistogram(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.01}, Counts: make([]uint64, 3)}
	for _, d := range []time.Duration{
		time.Microsecond,      // first bucket
		time.Millisecond,      // exactly on a bound: le, first bucket
		time.Millisecond + 1,  // second
		10 * time.Millisecond, // second
		time.Second,           // +Inf
	} {
		h.observe(d)
	}
	if !slices.Equal(h.Counts, []uint64{2, 2, 1}) || h.Count != 5 {
		t.Fatalf("counts %v count %d", h.Counts, h.Count)
	}
	if want := 1.012001001; h.Sum < want-1e-9 || h.Sum > want+1e-9 {
		t.Fatalf("sum %v, want %v", h.Sum, want)
	}
}

// TestIngest feeds GCStats by hand: new cycles go into the history and the
// histogram once, oldest first, and cycles the runtime forgot between two
// rounds are counted as missed.
func TestIngest(t *testing.T) {
	s, err := New(WithHistory(300), WithPauseBuckets([]float64{1e-3}))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1000, 0)
	set := func(num int, avail int) {
		g := &s.gcstats
		g.NumGC = int64(num)
		g.Pause, g.PauseEnd = g.Pause[:0], g.PauseEnd[:0]
		for i := range avail { // most recent first, like ReadGCStats
			c := num - i
			g.Pause = append(g.Pause, time.Duration(c)*time.Microsecond)
			g.PauseEnd = append(g.PauseEnd, base.Add(time.Duration(c)*time.Second))
		}
	}
	set(3, 3)
	s.ingest()
	s.snap.Samples++ // as if a round had completed
	set(3, 3)
	s.ingest() // nothing new
	set(5, 5)
	s.ingest()
	got := s.Pauses(nil)
	if len(got) != 5 {
		t.Fatalf("history %v", got)
	}
	for i, p := range got {
		c := uint64(i + 1)
		if p.Cycle != c || p.Duration != time.Duration(c)*time.Microsecond || !p.End.Equal(base.Add(time.Duration(c)*time.Second)) {
			t.Fatalf("pause %d = %+v", i, p)
		}
	}
	if s.hist.Count != 5 || s.pausesMissed != 0 {
		t.Fatalf("histogram count %d, missed %d", s.hist.Count, s.pausesMissed)
	}
	set(300, 256) // 295 new, the runtime remembers 256
	s.ingest()
	if s.pausesMissed != 39 || s.hist.Count != 5+256 {
		t.Fatalf("missed %d, histogram count %d", s.pausesMissed, s.hist.Count)
	}
	if got := s.PausesSince(298, nil); len(got) != 2 || got[0].Cycle != 299 || got[1].Cycle != 300 {
		t.Fatalf("PausesSince(298) = %v", got)
	}

	// The runtime's uint32 cycle count wraps; Pause.Cycle does not.
	s.lastNumGC = 1<<32 - 1
	set(2, 3) // cycles 2^32, 2^32+1 and 2^32+2, reported as 0, 1 and 2
	s.ingest()
	if got := s.PausesSince(1<<32-1, nil); len(got) != 3 || got[0].Cycle != 1<<32 || got[2].Cycle != 1<<32+2 {
		t.Fatalf("after wrap-around: %+v", got)
	}
}

// TestPausesFromRuntime checks the history against real GC cycles.
func TestPausesFromRuntime(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s.Sample()
	first := s.Snapshot().Cycles
	for range 3 {
		runtime.GC()
	}
	s.Sample()
	sn := s.Snapshot()
	ps := s.PausesSince(first, nil)
	if len(ps) < 3 {
		t.Fatalf("%d pauses since cycle %d, want >= 3 (snapshot %d cycles)", len(ps), first, sn.Cycles)
	}
	for i, p := range ps {
		if p.Duration <= 0 || p.End.IsZero() {
			t.Fatalf("pause %+v", p)
		}
		if i > 0 && (p.Cycle != ps[i-1].Cycle+1 || p.End.Before(ps[i-1].End)) {
			t.Fatalf("pauses out of order: %+v after %+v", p, ps[i-1])
		}
	}
	if last := ps[len(ps)-1].Cycle; last < sn.Cycles-1 || last > sn.Cycles+1 {
		t.Fatalf("latest pause cycle %d, snapshot says %d cycles", last, sn.Cycles)
	}
	h := sn.PauseHistogram
	var sum uint64
	for _, c := range h.Counts {
		sum += c
	}
	if h.Count == 0 || sum != h.Count || h.Sum <= 0 || len(h.Counts) != len(PauseBuckets)+1 {
		t.Fatalf("histogram %+v", h)
	}
	if sn.PauseMax <= 0 || sn.PauseP50 > sn.PauseP99 || sn.PauseP99 > sn.PauseMax || sn.PauseWindow == 0 {
		t.Fatalf("quantiles p50 %v p99 %v max %v window %d", sn.PauseP50, sn.PauseP99, sn.PauseMax, sn.PauseWindow)
	}
}
