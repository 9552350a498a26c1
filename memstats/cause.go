package memstats

import (
	"math"
	"runtime/metrics"
	"time"
)

// Work is what the GC did over the rate window (WithRateWindow) and what
// set its pace: the decomposition the cause detectors decide from. Every
// figure comes from runtime/metrics, read without stopping the world. The
// runtime updates its CPU accounting at GC cycle boundaries, so the CPU
// shares cover the cycles that ended within the window.
type Work struct {
	// Window is the span the rates and shares below cover: the rate
	// window, or less while less has been observed. Zero on the first
	// round, when the rates cover the program's lifetime.
	Window time.Duration

	// CyclesPerMinute is the rate of GC cycles (/gc/cycles/total), and
	// ForcedCyclesPerMinute the part of it that runtime.GC or
	// debug.FreeOSMemory forced (/gc/cycles/forced), over the same span.
	CyclesPerMinute, ForcedCyclesPerMinute float64
	// AllocBytesPerSecond is the allocation rate (/gc/heap/allocs:bytes).
	AllocBytesPerSecond float64

	// AssistFraction, DedicatedFraction, IdleFraction and PauseFraction
	// are the GC's CPU time by class, each as a share of all the CPU time
	// available to the process (GOMAXPROCS × wall time, as
	// /cpu/classes/total counts it): mark assists paid by allocating
	// goroutines, the dedicated mark workers, mark work on otherwise idle
	// Ps, and the stop-the-world pauses. Together they make
	// Snapshot.GCCPUFraction.
	AssistFraction, DedicatedFraction, IdleFraction, PauseFraction float64

	// StopTheWorld is how long the GC's stop-the-world pauses took over
	// the window, and Stopping the part of it spent bringing every
	// goroutine to a stop (/sched/pauses/total/gc and
	// /sched/pauses/stopping/gc). Both are summed from the runtime's
	// histograms at each bucket's midpoint, so they are estimates within
	// the buckets' width (a few percent). StopTheWorldCount counts the
	// pauses.
	StopTheWorld, Stopping time.Duration
	// StopTheWorldCount counts the GC's stop-the-world pauses over the
	// window.
	StopTheWorldCount uint64

	// GOGCGoal is the heap goal GOGC alone would set: HeapLive plus GOGC%
	// of HeapLive, the stacks and the globals scanned, and at least the
	// runtime's 4 MiB minimum heap scaled by GOGC. Zero when GOGC is off.
	GOGCGoal uint64
	// GoalSetBy says what set Snapshot.HeapGoal: one of the GoalBy*
	// constants.
	GoalSetBy string
	// LimiterLastEnabled is the GC cycle in which the GC CPU limiter was
	// last enabled (/gc/limiter/last-enabled), 0 if never. The limiter
	// caps the GC's CPU at about half of GOMAXPROCS when the memory limit
	// would otherwise make the GC run without pause, trading memory for
	// CPU.
	LimiterLastEnabled uint64
	// LimiterEngaged is true when the limiter was enabled in a cycle
	// within the window.
	LimiterEngaged bool

	// ScanHeap and ScanGlobals are the scannable heap and globals, and
	// ScanStack the stack bytes the latest cycle scanned (/gc/scan/*):
	// the work each cycle has to do.
	ScanHeap, ScanStack, ScanGlobals uint64
	// Goroutines is the number of live goroutines, whose stacks each
	// cycle scans.
	Goroutines uint64

	// RunnableWait is how long, on average since its previous read, a
	// goroutine that was ready to run waited for a CPU
	// (/sched/latencies): a few microseconds when the process has the
	// CPU it needs, milliseconds when its threads are starved (an
	// overloaded node, a CPU limit). Like CPUPressure it is read only
	// while stopping_latency's condition holds, at most once an
	// interval, off the sampling round's own read; 0 otherwise, or when
	// the previous read is too old (over ten seconds) to average over.
	RunnableWait time.Duration
	// CPUPressure is the share of the time in which some of the
	// process's threads waited for a CPU, as the kernel's pressure stall
	// information says (the cgroup's cpu.pressure, else
	// /proc/pressure/cpu, "some"): over the time since its previous read,
	// from the totals, or the latest ten seconds' average on the first;
	// negative when unknown. It is read only while stopping_latency's
	// condition holds, at most once an interval.
	CPUPressure float64

	// LiveGrowth is how much the live heap grew over LiveSpan, as a
	// fraction of where it began (0.25 is 25%); negative when it shrank.
	// Both ends are the lowest points of a quarter of the span: what was
	// allocated during a mark counts as live for that cycle, and only the
	// low points are what the program keeps.
	// The span is judged in time and in cycles: the oldest cycle the
	// sampler saw end within the rate window, or, when fewer than the
	// configured WithLiveHeapGrowth cycles ended in it, the one that many
	// cycles back. The live heap is read at the cycles' ends, at most a
	// few dozen points a window apart.
	LiveGrowth float64
	// LiveCycles is how many cycles LiveGrowth spans.
	LiveCycles int
	// LiveSpan is the time LiveGrowth spans.
	LiveSpan time.Duration
	// LiveRising reports that the live heap rose over the span: the
	// lowest point of each quarter of it is above the one before, a 2%
	// dip allowed.
	LiveRising bool
}

// What set the heap goal (Work.GoalSetBy).
const (
	// GoalByGOGC: the goal is what GOGC sets.
	GoalByGOGC = "gogc"
	// GoalByHeapMinimum: the live heap is so small that the runtime's
	// minimum heap (4 MiB × GOGC/100) sets the goal.
	GoalByHeapMinimum = "heap_minimum"
	// GoalByMemoryLimit: the memory limit (GOMEMLIMIT,
	// debug.SetMemoryLimit) holds the goal below what GOGC would allow,
	// or GOGC is off and only the limit sets it.
	GoalByMemoryLimit = "memory_limit"
)

// heapMinimum is the runtime's minimum heap goal at GOGC=100
// (runtime/mgcpace.go, defaultHeapMinimum), scaled by GOGC/100.
const heapMinimum = 4 << 20

// liveDip is the fall of the live heap from one cycle to the next that
// still counts as rising: a cache that grows while the rest of the heap
// churns does not mark exactly more every cycle.
const liveDip = 0.02

// maxLiveCycles bounds WithLiveHeapGrowth's cycles, and the ring of the
// live heap per cycle.
const maxLiveCycles = 64

// workState is the sampler's state for Work, across rounds; part of the
// round, guarded by the sampler's mutex.
type workState struct {
	// The stop-the-world histograms' previous counts, and the seconds
	// summed from their increments. Allocated on the first round: the
	// runtime's bucket count is fixed for the process.
	stopPrev, totalPrev []uint64
	stopSec, totalSec   float64

	// The live heap at the ends of cycles, kept at most every
	// rateWindow/liveSpacing, newest last (liveTrack).
	live liveTrack
}

// accumulate adds the increments of a cumulative time histogram since the
// previous round, each at its bucket's midpoint, to *sec; prev is
// allocated on first use only.
func accumulate(s []metrics.Sample, i int, prev *[]uint64, sec *float64) {
	if s[i].Value.Kind() != metrics.KindFloat64Histogram {
		return
	}
	h := s[i].Value.Float64Histogram()
	if len(*prev) != len(h.Counts) {
		*prev = make([]uint64, len(h.Counts))
	}
	for j, c := range h.Counts {
		d := c - (*prev)[j]
		if c < (*prev)[j] {
			d = 0
		}
		(*prev)[j] = c
		if d == 0 {
			continue
		}
		*sec += float64(d) * midpoint(h.Buckets[j], h.Buckets[j+1])
	}
}

// midpoint is a histogram bucket's representative value: the middle of
// [lo, hi), or its finite edge when the other is infinite.
func midpoint(lo, hi float64) float64 {
	switch {
	case math.IsInf(lo, 0) && math.IsInf(hi, 0):
		return 0
	case math.IsInf(lo, 0):
		return max(hi, 0)
	case math.IsInf(hi, 0):
		return lo
	}
	return (lo + hi) / 2
}

// readWork fills the stop-the-world part of r from the sampler's histograms.
func (w *workState) readWork(s []metrics.Sample, r *reading) {
	accumulate(s, idxStoppingGC, &w.stopPrev, &w.stopSec)
	accumulate(s, idxPausesGC, &w.totalPrev, &w.totalSec)
	r.stwStopSec, r.stwTotalSec = w.stopSec, w.totalSec
}

// work computes the round's Work from r and the point the rate window
// begins at (b; nil on the first round).
func (s *Sampler) work(now time.Time, r *reading, b *ratePoint, sn *Snapshot) {
	wk := &sn.Work
	var base ratePoint
	if b != nil {
		base = *b
		wk.Window = now.Sub(b.t)
	} else {
		wk.Window = 0
	}
	if sec := wk.Window.Seconds(); sec > 0 {
		wk.CyclesPerMinute = float64(sub0(r.cycles, base.cycles)) / sec * 60
		wk.ForcedCyclesPerMinute = float64(sub0(r.forced, base.forced)) / sec * 60
		wk.AllocBytesPerSecond = float64(sub0(r.allocBytes, base.allocBytes)) / sec
	} else {
		wk.CyclesPerMinute, wk.ForcedCyclesPerMinute, wk.AllocBytesPerSecond = 0, 0, 0
	}
	share := func(cur, old float64) float64 {
		d := r.cpuTotal - base.cpuTotal
		if d <= 0 {
			return 0
		}
		return min(max((cur-old)/d, 0), 1)
	}
	wk.AssistFraction = share(r.cpuAssist, base.cpuAssist)
	wk.DedicatedFraction = share(r.cpuDedicated, base.cpuDedicated)
	wk.IdleFraction = share(r.cpuIdle, base.cpuIdle)
	wk.PauseFraction = share(r.cpuPause, base.cpuPause)

	wk.StopTheWorld = secondsDuration(r.stwTotalSec - base.stwTotalSec)
	wk.Stopping = secondsDuration(r.stwStopSec - base.stwStopSec)
	wk.StopTheWorldCount = sub0(r.stwGC, base.stwGC)

	wk.GOGCGoal, wk.GoalSetBy = goalSetBy(r)
	wk.LimiterLastEnabled = r.limiterLast
	// The limiter was enabled within the window if in a cycle after the
	// window's first; on the first round, in any cycle so far.
	wk.LimiterEngaged = r.limiterLast > 0 && (b == nil || r.limiterLast > base.cycles)

	wk.ScanHeap, wk.ScanStack, wk.ScanGlobals = r.scanHeap, r.scanStack, r.scanGlobals
	wk.Goroutines = r.goroutines
	wk.RunnableWait, wk.CPUPressure = 0, -1
	s.wstate.live.observe(now, r, s.cfg.rateWindow, s.cfg.liveCycles, wk)
}

// secondsDuration converts seconds to a Duration, clamping negatives to 0.
func secondsDuration(sec float64) time.Duration {
	if sec <= 0 {
		return 0
	}
	return time.Duration(sec * float64(time.Second))
}

// goalSetBy returns the goal GOGC alone would set and what set the actual
// one. The runtime's goal at GOGC=g is heapMarked + (heapMarked +
// lastStackScan + globalsScan)×g/100 (runtime/mgcpace.go), at least the
// heap minimum; the memory limit lowers it. A goal 5% or more below GOGC's
// is the limit's doing: the margin absorbs the moment between the readings.
func goalSetBy(r *reading) (uint64, string) {
	limited := r.memoryLimit > 0 && r.memoryLimit < math.MaxInt64
	if r.gogc < 0 {
		if limited {
			return 0, GoalByMemoryLimit
		}
		return 0, GoalByGOGC
	}
	g := uint64(r.gogc)
	goal := r.heapLive + (r.heapLive+r.scanStack+r.scanGlobals)*g/100
	minimum := uint64(heapMinimum) * g / 100
	by := GoalByGOGC
	if minimum > goal {
		goal, by = minimum, GoalByHeapMinimum
	}
	if limited && r.heapGoal > 0 && float64(r.heapGoal) < 0.95*float64(goal) {
		by = GoalByMemoryLimit
	}
	return goal, by
}

// squeeze is memory_limit_pressure's value: how many times lower than
// GOGC's the memory limit holds the goal; 1 when it does not, +Inf-free:
// with GOGC off and only the limit setting the goal, maxSqueeze.
func squeeze(sn *Snapshot) float64 {
	wk := &sn.Work
	if wk.GoalSetBy != GoalByMemoryLimit {
		return 1
	}
	if wk.GOGCGoal == 0 || sn.HeapGoal == 0 {
		return maxSqueeze
	}
	return min(float64(wk.GOGCGoal)/float64(sn.HeapGoal), maxSqueeze)
}

// maxSqueeze caps memory_limit_pressure's value, which is unbounded when
// GOGC is off.
const maxSqueeze = 1000
