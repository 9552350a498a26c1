package tracing

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gcprobe/probe/memstats"
)

// fakePauses is a pause history a test appends to.
type fakePauses struct {
	mu     sync.Mutex
	pauses []memstats.Pause
	calls  int
}

func (f *fakePauses) add(p ...memstats.Pause) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, p...)
}

func (f *fakePauses) since(cycle uint64, dst []memstats.Pause) []memstats.Pause {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	for _, p := range f.pauses {
		if p.Cycle > cycle {
			dst = append(dst, p)
		}
	}
	return dst
}

func TestPauseSpanSynthetic(t *testing.T) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	src := &fakePauses{}
	src.add(
		memstats.Pause{Cycle: 7, End: end, Duration: 25 * time.Millisecond},
		memstats.Pause{Cycle: 8, End: end.Add(time.Second), Duration: 2 * time.Millisecond},
	)
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithPauseSource(src.since))

	if n := r.ReportPauses(context.Background()); n != 1 {
		t.Fatalf("ReportPauses = %d, want 1 (one pause over the 10ms default)", n)
	}
	spans := spansNamed(rec, "gcprobe.gc_pause")
	if len(spans) != 1 {
		t.Fatalf("%d gc_pause spans, want 1", len(spans))
	}
	s := spans[0]
	if !s.StartTime().Equal(end.Add(-25*time.Millisecond)) || !s.EndTime().Equal(end) {
		t.Errorf("span from %v to %v, want %v to %v", s.StartTime(), s.EndTime(), end.Add(-25*time.Millisecond), end)
	}
	assertAttrs(t, "gc_pause", attrs(t, s.Attributes()), map[string]any{
		"gcprobe.gc.cycle":    int64(7),
		"gcprobe.gc.pause_ns": int64(25 * time.Millisecond),
	})
	if len(s.Events()) != 0 || s.Parent().IsValid() {
		t.Errorf("events %v, parent %v", s.Events(), s.Parent())
	}

	// Reported pauses are not reported again; new ones are.
	if n := r.ReportPauses(context.Background()); n != 0 {
		t.Errorf("second ReportPauses = %d, want 0", n)
	}
	src.add(memstats.Pause{Cycle: 9, End: end.Add(2 * time.Second), Duration: 10 * time.Millisecond})
	if n := r.ReportPauses(context.Background()); n != 1 {
		t.Errorf("ReportPauses after a 10ms pause = %d, want 1 (the threshold is inclusive)", n)
	}
	if got := len(spansNamed(rec, "gcprobe.gc_pause")); got != 2 {
		t.Errorf("%d gc_pause spans in all, want 2", got)
	}
}

// A source that ignores since must not make a pause reported twice.
func TestPauseSourceIgnoringSince(t *testing.T) {
	all := []memstats.Pause{{Cycle: 1, End: time.Now(), Duration: time.Second}}
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithPauseSource(func(_ uint64, dst []memstats.Pause) []memstats.Pause {
		return append(dst, all...)
	}))
	r.ReportPauses(context.Background())
	r.ReportPauses(context.Background())
	if got := len(spansNamed(rec, "gcprobe.gc_pause")); got != 1 {
		t.Errorf("%d spans, want 1", got)
	}
}

func TestPauseSpanWithSamplerFigures(t *testing.T) {
	s := newSampler(t)
	runtime.GC() // cycle numbers start at 1
	s.Sample()
	snap := s.Snapshot()
	src := &fakePauses{}
	end := time.Now()
	// A synthetic 25ms pause for the cycle the sampler saw last: its
	// live heap after is known; the one before is not, since no poll saw
	// the previous cycle.
	src.add(memstats.Pause{Cycle: snap.Cycles, End: end, Duration: 25 * time.Millisecond})
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithSampler(s), WithPauseSource(src.since))
	if n := r.ReportPauses(context.Background()); n != 1 {
		t.Fatalf("ReportPauses = %d, want 1", n)
	}
	spans := spansNamed(rec, "gcprobe.gc_pause")
	assertAttrs(t, "gc_pause", attrs(t, spans[0].Attributes()), map[string]any{
		"gcprobe.gc.cycle":                int64(snap.Cycles),
		"gcprobe.gc.pause_ns":             int64(25 * time.Millisecond),
		"gcprobe.gc.sampled_cycle":        int64(snap.Cycles),
		"gcprobe.heap.live_after_bytes":   int64(snap.HeapLive),
		"gcprobe.finalizers.queue_length": int64(snap.Finalizers.Length),
		"gcprobe.cleanups.queue_length":   int64(snap.Cleanups.Length),
	})

	// The next cycle's pause, polled after a round that saw it: both
	// before and after are known.
	before := snap.HeapLive
	for s.Snapshot().Cycles == snap.Cycles {
		runtime.GC()
		s.Sample()
	}
	snap2 := s.Snapshot()
	src.add(memstats.Pause{Cycle: snap.Cycles + 1, End: time.Now(), Duration: 30 * time.Millisecond})
	if n := r.ReportPauses(context.Background()); n != 1 {
		t.Fatalf("ReportPauses = %d, want 1", n)
	}
	spans = spansNamed(rec, "gcprobe.gc_pause")
	a := attrs(t, spans[1].Attributes())
	if a["gcprobe.heap.live_before_bytes"] != int64(before) {
		t.Errorf("live_before_bytes = %v, want %d", a["gcprobe.heap.live_before_bytes"], before)
	}
	if snap2.Cycles == snap.Cycles+1 {
		if a["gcprobe.heap.live_after_bytes"] != int64(snap2.HeapLive) {
			t.Errorf("live_after_bytes = %v, want %d", a["gcprobe.heap.live_after_bytes"], snap2.HeapLive)
		}
	} else if _, ok := a["gcprobe.heap.live_after_bytes"]; ok {
		// More than one cycle ran: the poll saw a later cycle, and
		// the live heap right after this one is unknown.
		t.Errorf("live_after_bytes set although the poll saw cycle %d, not %d", snap2.Cycles, snap.Cycles+1)
	}
}

func TestPauseSpansFromRealGC(t *testing.T) {
	for _, threshold := range []time.Duration{0, time.Nanosecond} {
		t.Run(threshold.String(), func(t *testing.T) {
			s := newSampler(t)
			s.Sample()
			tp, rec := newRecorder(t)
			r := newReporter(t, WithTracerProvider(tp), WithSampler(s), WithPauseThreshold(threshold))
			r.ReportPauses(context.Background()) // the history before the test
			base := r.pauses.since               // the latest cycle reported
			runtime.GC()
			s.Sample()
			before := len(spansNamed(rec, "gcprobe.gc_pause"))
			if n := r.ReportPauses(context.Background()); n < 1 {
				t.Fatalf("ReportPauses after runtime.GC = %d, want >= 1", n)
			}
			want := s.PausesSince(base, nil)
			spans := spansNamed(rec, "gcprobe.gc_pause")[before:]
			if len(spans) != len(want) {
				t.Fatalf("%d spans for %d pauses", len(spans), len(want))
			}
			for i, sp := range spans {
				a := attrs(t, sp.Attributes())
				p := want[i]
				if a["gcprobe.gc.cycle"] != int64(p.Cycle) || a["gcprobe.gc.pause_ns"] != p.Duration.Nanoseconds() {
					t.Errorf("span %d: %v, want cycle %d pause %v", i, a, p.Cycle, p.Duration)
				}
				if p.Duration <= 0 || !sp.EndTime().Equal(p.End) || sp.EndTime().Sub(sp.StartTime()) != p.Duration {
					t.Errorf("span %d from %v to %v, pause %+v", i, sp.StartTime(), sp.EndTime(), p)
				}
			}
		})
	}
}

func TestNoPauseSource(t *testing.T) {
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)))
	if n := r.ReportPauses(context.Background()); n != 0 || len(rec.Ended()) != 0 {
		t.Errorf("without a pause source: %d pauses, %d spans", n, len(rec.Ended()))
	}
}
