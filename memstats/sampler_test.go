package memstats

import (
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/internal/lifecycle/lifecycletest"
	"github.com/gcprobe/probe/internal/testkit"
)

func TestMetricNamesSupported(t *testing.T) {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	names := MetricNames()
	if len(names) != numMetrics {
		t.Fatalf("%d names, want %d", len(names), numMetrics)
	}
	for i, n := range names {
		if n == "" {
			t.Fatalf("index %d has no name", i)
		}
		if !known[n] {
			t.Errorf("%s is not a runtime/metrics name on %s", n, runtime.Version())
		}
	}
}

func TestSampleReadsRuntime(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	s.Sample()
	sn := s.Snapshot()
	gogc := debug.SetGCPercent(100)
	debug.SetGCPercent(gogc)
	limit := debug.SetMemoryLimit(-1)
	switch {
	case sn.Samples != 1 || sn.Time.IsZero():
		t.Errorf("Samples %d, Time %v", sn.Samples, sn.Time)
	case sn.Cycles == 0 || sn.ForcedCycles == 0 || sn.ForcedCycles > sn.Cycles:
		t.Errorf("Cycles %d, ForcedCycles %d", sn.Cycles, sn.ForcedCycles)
	case sn.HeapLive == 0 || sn.HeapGoal < sn.HeapLive:
		t.Errorf("HeapLive %d, HeapGoal %d", sn.HeapLive, sn.HeapGoal)
	case sn.GOGC != int64(gogc):
		t.Errorf("GOGC %d, want %d", sn.GOGC, gogc)
	case sn.MemoryLimit != uint64(limit):
		t.Errorf("MemoryLimit %d, want %d", sn.MemoryLimit, limit)
	case sn.MCacheInuse == 0:
		t.Errorf("MCacheInuse 0")
	case sn.StopTheWorldGC == 0:
		t.Errorf("StopTheWorldGC 0 after runtime.GC")
	case sn.Finalizers.Executed > sn.Finalizers.Queued+1 || sn.Cleanups.Executed > sn.Cleanups.Queued+1:
		t.Errorf("queues %+v %+v", sn.Finalizers, sn.Cleanups)
	case sn.GCCPUFraction < 0 || sn.GCCPUFraction > 1:
		t.Errorf("GCCPUFraction %v", sn.GCCPUFraction)
	case sn.Finalizers.Latency != 0 || sn.ReadMemStats.Calls != 0:
		t.Errorf("latency %v without sentinels, %d ReadMemStats calls by default", sn.Finalizers.Latency, sn.ReadMemStats.Calls)
	}

	// GOGC=off arrives as -1.
	old := debug.SetGCPercent(-1)
	s.Sample()
	debug.SetGCPercent(old)
	if g := s.Snapshot().GOGC; g != -1 {
		t.Errorf("GOGC with GC off = %d, want -1", g)
	}
}

// TestUnsupportedMetricSkipped: a metric the running Go lacks reads as
// metrics.KindBad and leaves its field zero, nothing else.
func TestUnsupportedMetricSkipped(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s.samples[idxMCacheInuse].Name = "/memory/classes/metadata/no-such-thing:bytes"
	s.samples[idxPausesOther].Name = "/sched/pauses/total/no-such-thing:seconds"
	s.samples[idxCPUGC].Name = "/cpu/classes/no-such-thing:cpu-seconds"
	s.Sample()
	s.Sample()
	sn := s.Snapshot()
	if s.samples[idxMCacheInuse].Value.Kind() != metrics.KindBad {
		t.Fatal("expected KindBad")
	}
	if sn.MCacheInuse != 0 || sn.StopTheWorldOther != 0 || sn.GCCPUFraction != 0 {
		t.Fatalf("unsupported metrics read as %d %d %v", sn.MCacheInuse, sn.StopTheWorldOther, sn.GCCPUFraction)
	}
	if sn.HeapGoal == 0 {
		t.Fatal("supported metrics not read")
	}
}

// TestSampleAllocatesNothing locks the zero-allocation round in.
func TestSampleAllocatesNothing(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s.Subscribe(func(Event) {})
	runtime.GC()
	s.Sample() // warm-up: the first round sizes the GCStats buffers
	runtime.GC()
	s.Sample()
	if n := testing.AllocsPerRun(1000, s.Sample); n != 0 {
		t.Fatalf("Sample allocates %v times per round", n)
	}
	var sn Snapshot
	s.SnapshotInto(&sn)
	if n := testing.AllocsPerRun(100, func() { s.SnapshotInto(&sn) }); n != 0 {
		t.Fatalf("SnapshotInto allocates %v times per call", n)
	}
	ps := s.Pauses(nil)
	if n := testing.AllocsPerRun(100, func() { ps = s.Pauses(ps[:0]) }); n != 0 {
		t.Fatalf("Pauses into a large enough slice allocates %v times", n)
	}
}

// TestSampleWithReadMemStatsAllocatesNothing: ReadMemStats writes into a
// buffer the sampler owns.
func TestSampleWithReadMemStatsAllocatesNothing(t *testing.T) {
	clk := newManualClock()
	s, err := New(WithClock(clk), WithReadMemStats(true), WithReadMemStatsInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.Sample()
	if n := testing.AllocsPerRun(20, func() { clk.Advance(time.Second); s.Sample() }); n != 0 {
		t.Fatalf("Sample with ReadMemStats allocates %v times per round", n)
	}
}

func TestReadMemStatsRateLimit(t *testing.T) {
	clk := newManualClock()
	s, err := New(WithClock(clk), WithReadMemStats(true), WithReadMemStatsInterval(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	if _, ok := s.LastMemStats(&ms); ok {
		t.Fatal("LastMemStats before any round")
	}
	t0 := clk.Now()
	s.Sample()
	for range 9 {
		clk.Advance(time.Second)
		s.Sample()
	}
	info := s.Snapshot().ReadMemStats
	if info.Calls != 1 || !info.Last.Equal(t0) || !info.Enabled {
		t.Fatalf("after 9s: %+v, want one call at %v", info, t0)
	}
	clk.Advance(time.Second)
	s.Sample()
	info = s.Snapshot().ReadMemStats
	if info.Calls != 2 || info.LastDuration <= 0 || info.TotalDuration < info.LastDuration {
		t.Fatalf("after 10s: %+v, want a second measured call", info)
	}
	at, ok := s.LastMemStats(&ms)
	if !ok || !at.Equal(t0.Add(10*time.Second)) || ms.NumGC == 0 && ms.HeapAlloc == 0 {
		t.Fatalf("LastMemStats = %v %v, HeapAlloc %d", at, ok, ms.HeapAlloc)
	}
}

func TestDerivedSignals(t *testing.T) {
	f := newFed(t, WithInterval(time.Second), WithRateWindow(time.Minute))
	f.r = reading{finQueued: 100, finExecuted: 90, clnQueued: 5, clnExecuted: 5, cpuGC: 1, cpuTotal: 10}
	sn := f.round(0)
	if sn.Finalizers.Length != 10 || sn.Cleanups.Length != 0 || sn.Finalizers.GrowthPerSecond != 0 {
		t.Fatalf("first round queues %+v %+v", sn.Finalizers, sn.Cleanups)
	}
	if sn.GCCPUFraction != 0.1 {
		t.Fatalf("first round GCCPUFraction %v, want the lifetime 0.1", sn.GCCPUFraction)
	}

	// Half an interval later the growth is not recomputed.
	f.r.finQueued = 200
	if sn = f.round(500 * time.Millisecond); sn.Finalizers.GrowthPerSecond != 0 {
		t.Fatalf("growth after half an interval %v", sn.Finalizers.GrowthPerSecond)
	}
	// Two seconds after the anchor: +100 in 2s.
	f.r.finQueued = 300
	f.r.cpuGC, f.r.cpuTotal = 4, 20 // +3 of +10
	sn = f.round(1500 * time.Millisecond)
	if sn.Finalizers.Length != 210 || sn.Finalizers.GrowthPerSecond != 100 {
		t.Fatalf("queue %+v, want length 210 growing 100/s", sn.Finalizers)
	}
	if math.Abs(sn.GCCPUFraction-0.3) > 1e-9 {
		t.Fatalf("GCCPUFraction %v, want 0.3", sn.GCCPUFraction)
	}
	// Draining: negative growth. Executed past queued reads as empty.
	f.r.finExecuted = 301
	if sn = f.round(time.Second); sn.Finalizers.Length != 0 || sn.Finalizers.GrowthPerSecond != -210 {
		t.Fatalf("drained queue %+v", sn.Finalizers)
	}

	// After more than a window, the fraction covers the window only.
	f.r.cpuGC, f.r.cpuTotal = 5, 30
	f.round(time.Minute)
	f.r.cpuGC, f.r.cpuTotal = 5.5, 40
	sn = f.round(time.Minute)
	if math.Abs(sn.GCCPUFraction-0.05) > 1e-9 {
		t.Fatalf("windowed GCCPUFraction %v, want 0.05", sn.GCCPUFraction)
	}
	if sn.Samples != 6 {
		t.Fatalf("Samples %d", sn.Samples)
	}
}

func TestLifecycle(t *testing.T) {
	s, err := New(WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start: %v", err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("Run while started: %v", err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
	s.Stop()
	if err := s.Start(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run after Stop: %v", err)
	}
	s.Sample() // still works
	if s.Snapshot().Samples < 2 {
		t.Fatal("Sample after Stop did not sample")
	}

	// Stop on a sampler that never ran.
	s2, _ := New()
	s2.Stop()
	s2.Stop()
}

// TestRun drives Run with a manual clock: it samples at once, on every
// tick, returns nil when its context ends, and the sampler is then stopped
// for good: it runs once.
func TestRun(t *testing.T) {
	clk := newManualClock()
	s, err := New(WithClock(clk), WithInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	samples := func() uint64 { return s.Snapshot().Samples }
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	testkit.Poll(t, 5*time.Second, "the first round", func() bool { return samples() >= 1 })
	for range 3 {
		n := samples()
		clk.Advance(time.Second)
		testkit.Poll(t, 5*time.Second, "a round per tick", func() bool { return samples() > n })
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	if n := clk.Tickers(); n != 0 {
		t.Fatalf("%d tickers left running", n)
	}
	// Ended by its context: stopped, like after Stop.
	if err := s.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run after a Run ended: %v, want ErrStopped", err)
	}
	if err := s.Start(); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "memstats: Sampler.Start") {
		t.Fatalf("Start after a Run ended: %v, want ErrStopped naming memstats: Sampler.Start", err)
	}
}

// The lifecycle matrix: every order of Start, Run and Stop, and all of
// them from many goroutines at once, answer as package lifecycle says and
// leave no goroutine behind.
func TestLifecycleMatrix(t *testing.T) {
	subject := func(t *testing.T) lifecycletest.Subject {
		s, err := New(WithInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return lifecycletest.Subject{
			Start: s.Start,
			Run:   s.Run,
			Stop:  func() error { s.Stop(); return nil },
			State: s.life.State,
		}
	}
	ignore := goleak.IgnoreAnyFunction("runtime.runCleanups")
	t.Run("sequences", func(t *testing.T) { lifecycletest.Matrix(t, subject, lifecycle.Idle, ignore) })
	t.Run("concurrent", func(t *testing.T) { lifecycletest.Concurrent(t, subject, 20, 9, ignore) })
}

// TestWakesOnGC: with an interval of an hour only the sentinels wake the
// sampler, and each GC cycle does, measuring both queue latencies.
func TestWakesOnGC(t *testing.T) {
	s, err := New(WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	testkit.Poll(t, 5*time.Second, "the first round", func() bool { return s.Snapshot().Samples >= 1 })
	// With an hour's interval, every round after the first is a GC
	// cycle's: its sentinels woke the sampler.
	n := s.Snapshot().Samples
	testkit.AwaitGC(t, 10*time.Second, "sentinel runs after GC cycles", func() bool {
		sn := s.Snapshot()
		return sn.Samples > n && sn.Finalizers.SentinelLatency > 0 && sn.Cleanups.SentinelLatency > 0
	})
	sn := s.Snapshot()
	if sn.Finalizers.SentinelLatency > time.Second || sn.Cleanups.SentinelLatency > time.Second ||
		sn.Finalizers.Latency > time.Second || sn.Cleanups.Latency > time.Second {
		t.Fatalf("latencies %v %v (sentinels %v %v) on an idle queue", sn.Finalizers.Latency, sn.Cleanups.Latency,
			sn.Finalizers.SentinelLatency, sn.Cleanups.SentinelLatency)
	}
}

func TestSentinelRunsCounted(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	testkit.AwaitGC(t, 20*time.Second, "two sentinel runs of each kind", func() bool {
		f, c := s.SentinelRuns()
		return f >= 2 && c >= 2
	})
}
