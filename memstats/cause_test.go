package memstats

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// program describes a fed program's second: what its cumulative counters
// gain each second, on two CPUs. Fields at zero stay put.
type program struct {
	cyclesPerSec  uint64  // GC cycles a second
	gcCPU         float64 // GC share of the CPU
	assist        float64 // mark assists' share of the CPU
	allocPerSec   uint64  // bytes allocated a second
	stwPerSec     uint64  // stop-the-world pauses a second
	stopPerPause  time.Duration
	totalPerPause time.Duration
	liveStep      func(r *reading) // the live heap at each cycle
}

const testCPUs = 2

// second advances r by one second of p.
func (p program) second(r *reading) {
	r.cpuTotal += testCPUs
	r.cpuGC += testCPUs * p.gcCPU
	r.cpuAssist += testCPUs * p.assist
	r.cpuDedicated += testCPUs * (p.gcCPU - p.assist)
	r.allocBytes += p.allocPerSec
	r.stwGC += p.stwPerSec
	r.stwStopSec += float64(p.stwPerSec) * p.stopPerPause.Seconds()
	r.stwTotalSec += float64(p.stwPerSec) * p.totalPerPause.Seconds()
	if p.cyclesPerSec > 0 {
		r.cycles += p.cyclesPerSec
		if p.liveStep != nil {
			p.liveStep(r)
		}
	}
}

// runSeconds runs p for n one-second rounds and returns the events, the
// firing ones of cause detectors marked "+", resolving "-", with the second
// (1-based) they came in, e.g. "3:allocation_driven+".
func runSeconds(f *fed, p program, n int) []string {
	var got []string
	for i := 1; i <= n; i++ {
		p.second(&f.r)
		f.round(time.Second)
		for _, e := range f.take() {
			sign := "-"
			if e.Firing {
				sign = "+"
			}
			got = append(got, fmt.Sprintf("%02d:%s%s", i, e.Detector, sign))
		}
	}
	return got
}

// healthy is a steady healthy program: a GC cycle every ten seconds at 1%
// of the CPU, a few small pauses that are mostly stopped, a flat live heap.
var healthy = program{
	cyclesPerSec: 0, gcCPU: 0.01, assist: 0.001, allocPerSec: 400 << 10,
	stwPerSec: 0, stopPerPause: 10 * time.Microsecond, totalPerPause: 60 * time.Microsecond,
}

func TestCauseDetectors(t *testing.T) {
	const mib = 1 << 20
	base := func(r *reading) {
		r.gogc, r.memoryLimit = 100, math.MaxInt64
		r.heapLive, r.heapGoal = 20*mib, 40*mib
	}
	tests := []struct {
		name  string
		opts  []Option
		init  func(r *reading)
		p     program
		secs  int
		want  []string
		after func(t *testing.T, sn Snapshot)
	}{
		{
			name: "healthy program: no cause",
			p:    healthy,
			secs: 30,
		},
		{
			name: "allocation-driven fires once a quarter window is seen",
			p:    program{cyclesPerSec: 3, gcCPU: 0.10, allocPerSec: 100 * mib},
			secs: 5,
			// The window is 10 s; the first round (at 1 s) has no rate, the
			// 4th spans 3 s, the first at least a quarter window.
			want: []string{"04:allocation_driven+"},
			after: func(t *testing.T, sn Snapshot) {
				if got := sn.Work.CyclesPerMinute; got != 180 {
					t.Errorf("CyclesPerMinute = %v, want 180", got)
				}
				if got := sn.Work.AllocBytesPerSecond; got != 100*mib {
					t.Errorf("AllocBytesPerSecond = %v, want %v", got, 100*mib)
				}
			},
		},
		{
			name: "frequent cycles that cost little are not allocation-driven",
			p:    program{cyclesPerSec: 3, gcCPU: 0.02},
			secs: 15,
		},
		{
			name: "cycles just under the threshold",
			opts: []Option{WithAllocationDriven(200, 0.05)},
			p:    program{cyclesPerSec: 3, gcCPU: 0.3},
			secs: 15,
		},
		{
			name: "live heap growing 2 MiB a cycle",
			p: program{cyclesPerSec: 1, gcCPU: 0.01, liveStep: func(r *reading) {
				r.heapLive += 2 * mib
				r.heapGoal = 2 * r.heapLive
			}},
			secs: 6,
			// Judged over half the 10 s window at least: by the 6th
			// round the span is 5 s and 5 cycles, 22..32 MiB, 45% >= 10%.
			want: []string{"06:live_heap_growth+"},
			after: func(t *testing.T, sn Snapshot) {
				if !sn.Work.LiveRising || sn.Work.LiveCycles != 5 || sn.Work.LiveSpan != 5*time.Second {
					t.Errorf("Work = %+v, want rising over 5 cycles and 5 s", sn.Work)
				}
			},
		},
		{
			name: "a large live heap rising by less than 4 MiB over the window",
			p: program{cyclesPerSec: 1, gcCPU: 0.01, liveStep: func(r *reading) {
				r.heapLive += 300 << 10
			}},
			init: func(r *reading) { base(r); r.heapLive = 600 * mib },
			secs: 20,
		},
		{
			name: "live heap growing under 4 MiB over the cycles",
			p: program{cyclesPerSec: 1, gcCPU: 0.01, liveStep: func(r *reading) {
				r.heapLive += 200 << 10
			}},
			init: func(r *reading) { base(r); r.heapLive = 1 * mib }, // 20% a cycle, but tiny
			secs: 6,
		},
		{
			name: "a large live heap rising slowly",
			p: program{cyclesPerSec: 1, gcCPU: 0.01, liveStep: func(r *reading) {
				r.heapLive += 2 * mib // 0.3% a cycle
			}},
			init: func(r *reading) { base(r); r.heapLive = 600 * mib },
			secs: 6,
			want: []string{"06:live_heap_growth+"}, // 10 MiB over 5 s: 1.7%, but above 500 MiB
		},
		{
			name: "a flat live heap with noise",
			p: program{cyclesPerSec: 1, gcCPU: 0.01, liveStep: func(r *reading) {
				if r.cycles%2 == 0 {
					r.heapLive = 30 * mib
				} else {
					r.heapLive = 20 * mib
				}
			}},
			secs: 10,
		},
		{
			name: "memory limit holds the goal",
			init: func(r *reading) {
				base(r)
				r.memoryLimit = 32 * mib
				r.heapGoal = 28 * mib // GOGC would allow 40
			},
			p:    healthy,
			secs: 2,
			want: []string{"01:memory_limit_pressure+"},
			after: func(t *testing.T, sn Snapshot) {
				if sn.Work.GoalSetBy != GoalByMemoryLimit || sn.Work.GOGCGoal != 40*mib {
					t.Errorf("GoalSetBy %q, GOGCGoal %d", sn.Work.GoalSetBy, sn.Work.GOGCGoal)
				}
			},
		},
		{
			name: "memory limit set but far",
			init: func(r *reading) { base(r); r.memoryLimit = 1 << 30 },
			p:    healthy,
			secs: 3,
			after: func(t *testing.T, sn Snapshot) {
				if sn.Work.GoalSetBy != GoalByGOGC {
					t.Errorf("GoalSetBy %q, want gogc", sn.Work.GoalSetBy)
				}
			},
		},
		{
			name: "the heap minimum sets a small heap's goal",
			init: func(r *reading) { base(r); r.heapLive, r.heapGoal = 1*mib, 4*mib },
			p:    healthy,
			secs: 2,
			after: func(t *testing.T, sn Snapshot) {
				if sn.Work.GoalSetBy != GoalByHeapMinimum {
					t.Errorf("GoalSetBy %q, want heap_minimum", sn.Work.GoalSetBy)
				}
			},
		},
		{
			name: "stopping dominates the pauses",
			p:    program{stwPerSec: 2, stopPerPause: 3 * time.Millisecond, totalPerPause: 4 * time.Millisecond, gcCPU: 0.01},
			secs: 5,
			want: []string{"04:stopping_latency+"},
		},
		{
			name: "stopping dominates but is short",
			p:    program{stwPerSec: 2, stopPerPause: 90 * time.Microsecond, totalPerPause: 100 * time.Microsecond, gcCPU: 0.01},
			secs: 5,
		},
		{
			name: "assists take 8% of the CPU",
			p:    program{cyclesPerSec: 0, gcCPU: 0.3, assist: 0.08},
			secs: 5,
			want: []string{"04:assist_heavy+"},
		},
		{
			name: "assists at 4%",
			p:    program{gcCPU: 0.3, assist: 0.04},
			secs: 10,
		},
		{
			name: "a disabled cause stays silent",
			opts: []Option{WithoutDetector(DetectorAssistHeavy)},
			p:    program{gcCPU: 0.3, assist: 0.08},
			secs: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFed(t, append([]Option{WithRateWindow(10 * time.Second)}, tt.opts...)...)
			if tt.init != nil {
				tt.init(&f.r)
			} else {
				base(&f.r)
			}
			got := strings.Join(runSeconds(f, tt.p, tt.secs), ",")
			if want := strings.Join(tt.want, ","); got != want {
				t.Fatalf("events %q, want %q (work %+v)", got, want, f.s.Snapshot().Work)
			}
			if tt.after != nil {
				tt.after(t, f.s.Snapshot())
			}
		})
	}
}

func TestCauseLimiterEngaged(t *testing.T) {
	const mib = 1 << 20
	f := newFed(t, WithRateWindow(4*time.Second), WithoutDetector(DetectorAllocationDriven))
	f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, 64*mib, 20*mib, 40*mib
	p := program{cyclesPerSec: 1, gcCPU: 0.5}
	if got := runSeconds(f, p, 2); len(got) != 0 {
		t.Fatalf("before the limiter: %q", got)
	}
	f.r.limiterLast = f.r.cycles + 1 // enabled in the next cycle
	if got := strings.Join(runSeconds(f, p, 1), ","); got != "01:memory_limit_pressure+" {
		t.Fatalf("limiter enabled: %q", got)
	}
	a := f.s.Active(nil)
	if len(a) != 1 || !strings.Contains(a[0].Cause(), "limiter engaged") {
		t.Fatalf("Active %+v, cause %q", a, a[0].Cause())
	}
	// Not enabled again: once the window has moved past its cycle, it resolves.
	if got := strings.Join(runSeconds(f, p, 6), ","); !strings.Contains(got, "memory_limit_pressure-") {
		t.Fatalf("limiter long gone: %q", got)
	}
}

func TestCauseWords(t *testing.T) {
	tests := []struct {
		give Event
		want string
	}{
		{Event{Detector: DetectorAllocationDriven, Value: 412, Threshold: 60}, "allocation-driven: 412 GC cycles a minute nobody forced (threshold 60)"},
		{Event{Detector: DetectorLiveHeapGrowth, Value: 0.38, Threshold: 0.1}, "live-heap growth: the live heap grew 38% over the latest window (threshold 10%, or any steady rise"},
		{Event{Detector: DetectorMemoryLimitPressure, Value: 2.1, Threshold: 1.05}, "memory limit holds the heap goal 2.10x below"},
		{Event{Detector: DetectorMemoryLimitPressure, Value: maxSqueeze, Threshold: 1.05}, "GOGC is off"},
		{Event{Detector: DetectorStoppingLatency, Value: 0.73, Threshold: 0.5}, "73% of the GC's stop-the-world time was spent stopping"},
		{Event{Detector: DetectorStoppingLatency, Value: 0.73, Threshold: 0.5, Reason: ReasonCPUStarvation}, "CPU starvation: 73%"},
		{Event{Detector: DetectorAssistHeavy, Value: 0.12, Threshold: 0.05}, "mark assists took 12.0% of the CPU (threshold 5.0%)"},
		{Event{Detector: DetectorForcedGC, Value: 9, Threshold: 5}, "forced GC: 9 cycles a minute forced by runtime.GC or debug.FreeOSMemory (threshold 5)"},
		{Event{Detector: DetectorQueueLatency, Value: 9, Threshold: 5}, ""},
	}
	for _, tt := range tests {
		got := tt.give.Cause()
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: Cause() = %q, want it to contain %q", tt.give.Detector, got, tt.want)
		}
	}
	if n := len(CauseDetectors()); n != 6 || !IsCause(DetectorAssistHeavy) || !IsCause(DetectorForcedGC) || IsCause(DetectorQueueLatency) || IsCause("nonsense") {
		t.Errorf("CauseDetectors %v", CauseDetectors())
	}
}

func TestCauseOptionsRejectBadValues(t *testing.T) {
	for _, o := range []Option{
		WithAllocationDriven(0, 0.1), WithAllocationDriven(60, 0), WithAllocationDriven(60, 1.5),
		WithLiveHeapGrowth(1, 0.1, 1), WithLiveHeapGrowth(4, 0, 1), WithLiveHeapGrowth(4, 0.1, 0), WithLiveHeapGrowth(65, 0.1, 1),
		WithMemoryLimitPressure(0.9), WithMemoryLimitPressure(math.Inf(1)),
		WithStoppingLatency(0, 0), WithStoppingLatency(0.5, -1),
		WithAssistHeavy(0), WithAssistHeavy(2),
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New accepted a bad cause option")
		}
	}
}

// TestWorkFromTheRuntime reads the decomposition from the real runtime: a
// burst of allocation between two rounds shows as an allocation rate, GC
// cycles and GC CPU, and the stop-the-world split is consistent.
func TestWorkFromTheRuntime(t *testing.T) {
	clk := newManualClock()
	s, err := New(WithClock(clk), WithRateWindow(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.Sample()
	clk.Advance(2 * time.Second)
	var keep [][]byte
	for range 20000 {
		keep = append(keep, make([]byte, 1024))
		if len(keep) > 1000 {
			keep = keep[:0]
		}
	}
	for range 3 {
		runtime.GC()
	}
	s.Sample()
	w := s.Snapshot().Work
	if w.AllocBytesPerSecond < 20000*1024/2/2 {
		t.Errorf("AllocBytesPerSecond %v, want at least 5 MB/s over the 2 s", w.AllocBytesPerSecond)
	}
	if w.CyclesPerMinute < 3*30 {
		t.Errorf("CyclesPerMinute %v, want at least 3 cycles in 2 s", w.CyclesPerMinute)
	}
	if w.StopTheWorldCount < 6 || w.StopTheWorld <= 0 || w.Stopping > w.StopTheWorld {
		t.Errorf("stop-the-world %d pauses, %v, stopping %v", w.StopTheWorldCount, w.StopTheWorld, w.Stopping)
	}
	if w.Goroutines == 0 || w.ScanGlobals == 0 || w.ScanHeap == 0 {
		t.Errorf("Goroutines %d, ScanGlobals %d, ScanHeap %d", w.Goroutines, w.ScanGlobals, w.ScanHeap)
	}
	if w.GoalSetBy == "" {
		t.Errorf("GoalSetBy empty")
	}
}
