package memstats

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// pausesOther returns how many non-GC stop-the-world pauses the program has
// had, from /sched/pauses/total/other:seconds.
func pausesOther(t *testing.T) uint64 {
	s := []metrics.Sample{{Name: "/sched/pauses/total/other:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		t.Skipf("%s not supported by %s", s[0].Name, runtime.Version())
	}
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

// TestNoStopTheWorld shows both sides: in its default mode the sampler adds
// nothing to /sched/pauses/total/other:seconds over 1000 rounds, with its
// goroutine and sentinels running and GC cycles going on; with ReadMemStats
// turned on, every call adds a pause.
//
// The test process must be quiet meanwhile: no test runs in parallel with
// this one (runtime.GC is a GC pause, but goroutine profiles, ReadMemStats
// from testing.AllocsPerRun or -benchmem would be "other").
func TestNoStopTheWorld(t *testing.T) {
	s, err := New(WithInterval(time.Millisecond), WithoutDetector(DetectorForcedGC))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.Sample()

	// Something outside the sampler could stop the world at the wrong
	// moment; a sampler that did would do it on every attempt.
	var delta uint64
	for attempt := 1; attempt <= 3; attempt++ {
		before := pausesOther(t)
		rounds := s.Snapshot().Samples
		for i := range 1000 {
			s.Sample()
			if i%250 == 0 {
				runtime.GC() // wakes the sentinels
			}
		}
		delta = pausesOther(t) - before
		rounds = s.Snapshot().Samples - rounds
		if delta == 0 {
			t.Logf("%d rounds (1000 by Sample, the rest by the goroutine), no stop-the-world", rounds)
			break
		}
		t.Logf("attempt %d: %d stop-the-world pauses during %d rounds", attempt, delta, rounds)
	}
	if delta != 0 {
		t.Fatalf("the sampler stopped the world %d times in default mode", delta)
	}
	// The sentinels run on the finalizer goroutine, which a loaded host
	// may not have scheduled yet: wait for a latency, with a deadline.
	testkit.AwaitGC(t, 10*time.Second, "a sentinel's latency", func() bool {
		s.Sample()
		return s.Snapshot().Finalizers.SentinelLatency != 0
	})
	if sn := s.Snapshot(); sn.ReadMemStats.Calls != 0 {
		t.Fatalf("ReadMemStats called %d times", sn.ReadMemStats.Calls)
	}
	s.Stop()

	// ReadMemStats on, at its 1s floor: 1000 rounds 100ms apart by the
	// manual clock call it 100 times, each a pause.
	clk := newManualClock()
	rm, err := New(WithClock(clk), WithReadMemStats(true), WithReadMemStatsInterval(MinReadMemStatsInterval))
	if err != nil {
		t.Fatal(err)
	}
	before := pausesOther(t)
	for range 1000 {
		rm.Sample()
		clk.Advance(100 * time.Millisecond)
	}
	delta = pausesOther(t) - before
	info := rm.Snapshot().ReadMemStats
	t.Logf("with ReadMemStats: %d calls, %d stop-the-world pauses, last call %v, total %v",
		info.Calls, delta, info.LastDuration, info.TotalDuration)
	if info.Calls != 100 {
		t.Fatalf("%d ReadMemStats calls in 100s at most one a second, want 100", info.Calls)
	}
	if delta < info.Calls {
		t.Fatalf("%d stop-the-world pauses for %d ReadMemStats calls", delta, info.Calls)
	}
}
