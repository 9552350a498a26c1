package memstats

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestCauseHysteresis: a cause whose condition flickers logs nothing; one
// that holds fires once it has held DefaultCauseFireAfter; one that stops
// resolves only once it has not held for DefaultCauseHold; and a condition
// that comes and goes every 40 s changes state at most once a minute.
func TestCauseHysteresis(t *testing.T) {
	const mib = 1 << 20
	f := newFed(t, WithCauseHysteresis(DefaultCauseFireAfter, DefaultCauseHold))
	f.r.gogc, f.r.memoryLimit, f.r.heapLive = 100, 32*mib, 20*mib
	limited := func(on bool) func(r *reading) {
		return func(r *reading) {
			r.heapGoal = 40 * mib // GOGC's
			if on {
				r.heapGoal = 28 * mib
			}
		}
	}
	var log []string
	run := func(secs int, on func(i int) bool) {
		for i := range secs {
			limited(on(i))(&f.r)
			sn := f.round(time.Second)
			for _, e := range f.take() {
				log = append(log, sn.Time.Format("04:05")+" "+e.Detector+map[bool]string{true: "+", false: "-"}[e.Firing])
			}
		}
	}
	// Flickering every other second for two minutes: never 10 s on end.
	run(120, func(i int) bool { return i%2 == 0 })
	if len(log) != 0 {
		t.Fatalf("a flickering condition logged %q", log)
	}
	// Holding: fires 10 s in.
	run(30, func(int) bool { return true })
	if len(log) != 1 || !strings.HasPrefix(log[0], "02:11 memory_limit_pressure+") {
		t.Fatalf("holding: %q, want one firing at 02:11", log)
	}
	// Off for 30 s, on again: no change.
	run(30, func(int) bool { return false })
	run(10, func(int) bool { return true })
	if len(log) != 1 {
		t.Fatalf("a 30 s gap resolved it: %q", log)
	}
	if a := f.s.Active(nil); len(a) != 1 {
		t.Fatalf("Active during the gap = %+v, want the cause", a)
	}
	// Off for good: resolves a minute after it stopped holding.
	run(70, func(int) bool { return false })
	if len(log) != 2 || !strings.HasPrefix(log[1], "04:11 memory_limit_pressure-") {
		t.Fatalf("stopping: %q, want a resolution at 04:11", log)
	}
	// 40 s on, 40 s off, for ten minutes: at most one change a minute.
	log = nil
	run(600, func(i int) bool { return (i/40)%2 == 0 })
	if len(log) > 10 {
		t.Fatalf("%d changes in 10 minutes, want at most 10: %q", len(log), log)
	}
	for i := 1; i < len(log); i++ {
		a, _ := time.Parse("04:05", log[i-1][:5])
		b, _ := time.Parse("04:05", log[i][:5])
		if d := b.Sub(a); d < time.Minute && d > -50*time.Minute {
			t.Errorf("changes %q and %q are %v apart", log[i-1], log[i], d)
		}
	}
}

// TestForcedRateAtEveryCycle: a runtime.GC loop wakes the sampler at every
// cycle; 1 100 forced cycles a minute read as that, within 10%, and as
// forced, not allocation-driven.
func TestForcedRateAtEveryCycle(t *testing.T) {
	f := newFed(t) // the default one-minute window
	f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 8<<20, 16<<20
	var events []string
	// 1 100 a minute: a round every 54.5 ms, one forced cycle each, for
	// two minutes, with the GC at 30% of the CPU.
	step := time.Minute / 1100
	for range 2200 {
		f.r.cycles++
		f.r.forced++
		f.r.cpuTotal += testCPUs * step.Seconds()
		f.r.cpuGC += 0.3 * testCPUs * step.Seconds()
		f.r.allocBytes += 1 << 10
		f.round(step)
		for _, e := range f.take() {
			events = append(events, e.Detector)
		}
	}
	sn := f.s.Snapshot()
	if got := sn.ForcedPerMinute; got < 990 || got > 1210 {
		t.Errorf("ForcedPerMinute = %.0f, want 1100 within 10%%", got)
	}
	if got := strings.Join(events, ","); got != DetectorForcedGC {
		t.Errorf("events %q, want forced_gc alone", got)
	}
	a := f.s.Active(nil)
	if len(a) != 1 || a[0].Fix == "" || !strings.Contains(a[0].Cause(), "forced by runtime.GC") {
		t.Errorf("Active %+v", a)
	}
}

// TestAllocationDrivenByRate: frequent cycles at a small GC CPU share are
// allocation-driven when the program allocates fast (the shape measured on
// a program copying a 12 KiB struct a loop: 2 000-5 500 cycles a minute at
// 300 MiB/s, GC CPU 4.2-4.7%); the same cycles at a low rate are not.
func TestAllocationDrivenByRate(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		alloc uint64
		want  string
	}{
		{300 * mib, "04:allocation_driven+"},
		{8 * mib, ""},
	} {
		f := newFed(t, WithRateWindow(10*time.Second))
		f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 40*mib, 80*mib
		got := strings.Join(runSeconds(f, program{cyclesPerSec: 60, gcCPU: 0.045, allocPerSec: tt.alloc}, 6), ",")
		if got != tt.want {
			t.Errorf("at %d MiB/s: events %q, want %q", tt.alloc/mib, got, tt.want)
		}
	}
}

// TestAllocationFixForATinyHeap: a tiny live heap gets GOGC (and
// GOMEMLIMIT) with numbers; a large one gets the lines.
func TestAllocationFixForATinyHeap(t *testing.T) {
	const mib = 1 << 20
	f := newFed(t, WithRateWindow(10*time.Second))
	f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 1*mib, 4*mib
	runSeconds(f, program{cyclesPerSec: 20, gcCPU: 0.2, allocPerSec: 80 * mib}, 5)
	a := f.s.Active(nil)
	if len(a) != 1 || a[0].Detector != DetectorAllocationDriven {
		t.Fatalf("Active %+v", a)
	}
	for _, want := range []string{"live heap is only 1.0 MiB", "every 3.0 MiB allocated", "GOGC=400", "300 times a minute instead of 1200", "GOMEMLIMIT"} {
		if !strings.Contains(a[0].Fix, want) {
			t.Errorf("Fix %q lacks %q", a[0].Fix, want)
		}
	}

	f = newFed(t, WithRateWindow(10*time.Second))
	f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 200*mib, 400*mib
	runSeconds(f, program{cyclesPerSec: 20, gcCPU: 0.2, allocPerSec: 80 * mib}, 5)
	if a := f.s.Active(nil); len(a) != 1 || strings.Contains(a[0].Fix, "GOGC=") || !strings.Contains(a[0].Fix, "lines named") {
		t.Errorf("large heap: Active %+v", a)
	}
}

// TestStoppingLatencyReason: the same stopping share is CPU starvation when
// goroutines wait long to run or the kernel says the CPU is short, and a
// goroutine slow to stop otherwise.
func TestStoppingLatencyReason(t *testing.T) {
	slow := program{stwPerSec: 2, stopPerPause: 3 * time.Millisecond, totalPerPause: 4 * time.Millisecond, gcCPU: 0.01}
	for _, tt := range []struct {
		name     string
		pressure float64 // negative: unknown
		wait     time.Duration
		want     string
	}{
		{"nothing says starved", -1, 20 * time.Microsecond, ReasonSafePoint},
		{"the kernel's CPU pressure", 0.35, 20 * time.Microsecond, ReasonCPUStarvation},
		{"low pressure", 0.02, 20 * time.Microsecond, ReasonSafePoint},
		{"long run-queue waits", -1, 2 * time.Millisecond, ReasonCPUStarvation},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFed(t, WithRateWindow(10*time.Second))
			f.s.cfg.pressure = func() (cpuPressure, bool) { return cpuPressure{avg10: tt.pressure}, tt.pressure >= 0 }
			f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 20<<20, 40<<20
			for range 5 {
				f.wait.n += 1000
				f.wait.sec += 1000 * tt.wait.Seconds()
				slow.second(&f.r)
				f.round(time.Second)
			}
			a := f.s.Active(nil)
			if len(a) != 1 || a[0].Reason != tt.want {
				t.Fatalf("Active %+v, want reason %s", a, tt.want)
			}
			words := a[0].Cause()
			if starved := strings.Contains(words, "CPU starvation"); starved != (tt.want == ReasonCPUStarvation) {
				t.Errorf("words %q for reason %s", words, tt.want)
			}
			if sn := f.s.Snapshot(); sn.Work.RunnableWait != tt.wait.Round(time.Microsecond) && sn.Work.RunnableWait.Round(time.Microsecond) != tt.wait {
				t.Errorf("RunnableWait %v, want %v", sn.Work.RunnableWait, tt.wait)
			}
		})
	}
}

// TestLiveGrowthJudgedInTime: at 50 cycles a second, a live heap that
// rises 0.1% a cycle (steady growth) fires once half the window has seen
// it; a sawtooth that rises for 8 cycles and drops back never fires, where
// judging over the latest 4 cycles fired and cleared on every tooth.
func TestLiveGrowthJudgedInTime(t *testing.T) {
	const mib = 1 << 20
	run := func(live func(cycle int) uint64, secs int) (string, Work) {
		f := newFed(t) // one-minute window
		f.r.gogc, f.r.memoryLimit, f.r.heapLive, f.r.heapGoal = 100, math.MaxInt64, 40*mib, 80*mib
		var got []string
		c := 0
		for s := 1; s <= secs; s++ {
			for range 50 {
				c++
				f.r.cycles++
				f.r.heapLive = live(c)
				f.r.cpuTotal += testCPUs * 0.02
				f.r.cpuGC += testCPUs * 0.02 * 0.01
				f.round(20 * time.Millisecond)
				for _, e := range f.take() {
					if e.Detector == DetectorLiveHeapGrowth {
						got = append(got, map[bool]string{true: "+", false: "-"}[e.Firing]+time.Duration(s*int(time.Second)).String())
					}
				}
			}
		}
		return strings.Join(got, ","), f.s.Snapshot().Work
	}
	got, wk := run(func(c int) uint64 { return uint64(40 * mib * math.Pow(1.001, float64(c))) }, 45)
	if got != "+31s" {
		t.Errorf("steady growth: %q, want firing once 30 s are seen (work %+v)", got, wk)
	}
	got, wk = run(func(c int) uint64 { return 40*mib + uint64(c%8)*2*mib }, 90)
	if got != "" {
		t.Errorf("sawtooth: %q (work %+v)", got, wk)
	}
}

func TestParsePressure(t *testing.T) {
	for _, tt := range []struct {
		give string
		want cpuPressure
		ok   bool
	}{
		{"some avg10=12.50 avg60=3.00 avg300=1.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", cpuPressure{0.125, 123}, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", cpuPressure{0, 0}, true},
		{"full avg10=5.00 total=1\n", cpuPressure{}, false},
		{"some avg10=x total=1\n", cpuPressure{}, false},
		{"some avg10=1.00\n", cpuPressure{}, false},
		{"", cpuPressure{}, false},
	} {
		got, ok := parsePressure([]byte(tt.give))
		if ok != tt.ok || math.Abs(got.avg10-tt.want.avg10) > 1e-9 || got.total != tt.want.total {
			t.Errorf("parsePressure(%q) = %+v, %v; want %+v, %v", tt.give, got, ok, tt.want, tt.ok)
		}
	}
}

// TestPressureSince: the share since the previous read comes from the
// totals, so a neighbour that starts now shows at once; avg10 stands in
// when there is no usable previous read.
func TestPressureSince(t *testing.T) {
	prev := cpuPressure{avg10: 0.01, total: 1_000_000}
	cur := cpuPressure{avg10: 0.05, total: 1_000_000 + 800_000}
	if got := pressureSince(prev, cur, time.Second); math.Abs(got-0.8) > 1e-9 {
		t.Errorf("over a second with 0.8 s waited: %v, want 0.8", got)
	}
	if got := pressureSince(cpuPressure{}, cur, time.Second); got != 0.05 {
		t.Errorf("no previous read: %v, want avg10", got)
	}
	if got := pressureSince(prev, cur, time.Millisecond); got != 0.05 {
		t.Errorf("a millisecond apart: %v, want avg10", got)
	}
	if got := pressureSince(prev, cur, time.Hour); got != 0.05 {
		t.Errorf("an hour apart: %v, want avg10", got)
	}
}
