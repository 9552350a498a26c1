package memstats

import (
	"fmt"
	"math"
	"time"
)

// The cause detectors: why the GC works hard. Each decides from
// Snapshot.Work (and the heap figures beside it) over the rate window, and
// its Event says the cause in words (Event.Cause) with the number that
// decided it, and what to change (Event.Fix). A healthy program fires none.
//
// They move with hysteresis (WithCauseHysteresis): a cause fires once its
// condition has held for DefaultCauseFireAfter, resolves once it has not
// held for DefaultCauseHold, and changes state at most once per
// DefaultCauseHold. The Report, the live page and /metrics all read that
// one state, so they say the same thing at the same moment. forced_gc
// (DetectorForcedGC) is a cause too.
const (
	// DetectorAllocationDriven fires when GC cycles are frequent because
	// the program allocates fast: over the rate window, at least
	// DefaultAllocationCyclesPerMinute cycles a minute that nobody forced,
	// while the GC takes at least DefaultAllocationGCCPU of the CPU or the
	// program allocates at least DefaultAllocationBytesPerSecond
	// (WithAllocationDriven, WithAllocationRate), and the memory limit
	// does not hold the heap goal (memory_limit_pressure's condition,
	// which explains the frequent cycles then). Value and Threshold are
	// cycles per minute. The allocating lines are the heap profile's
	// business (package heapprofile).
	DetectorAllocationDriven = "allocation_driven"
	// DetectorLiveHeapGrowth fires when the live heap rose over the rate
	// window (the low point of each quarter of it above the one before, a
	// 2% dip allowed: see Work.LiveRising), judged in time and in cycles: over at least half the window and at least
	// DefaultLiveHeapGrowthCycles cycles (see Work.LiveGrowth), by at
	// least 4 MiB, and either by DefaultLiveHeapGrowth of where it began
	// or while above DefaultLiveHeapBytes (WithLiveHeapGrowth): something
	// keeps what it allocates, a cache or a leak. Value and Threshold are
	// the growth as a fraction (0.25 is 25%).
	DetectorLiveHeapGrowth = "live_heap_growth"
	// DetectorMemoryLimitPressure fires when the memory limit (GOMEMLIMIT,
	// debug.SetMemoryLimit) holds the heap goal at least
	// DefaultMemoryLimitSqueeze times below what GOGC alone would allow,
	// or the GC CPU limiter was enabled within the rate window
	// (WithMemoryLimitPressure): the GC runs early and often to stay under
	// the limit. Value and Threshold are that ratio (GOGC's goal over the
	// actual one; 1000 when GOGC is off).
	DetectorMemoryLimitPressure = "memory_limit_pressure"
	// DetectorStoppingLatency fires when, over the rate window, at least
	// DefaultStoppingShare of the GC's stop-the-world time was spent
	// stopping the world, and stopping took DefaultStoppingMin or more
	// per pause on average (WithStoppingLatency). Its Event.Reason says
	// why: ReasonCPUStarvation when the process's threads were short of
	// CPU meanwhile (goroutines waited DefaultStoppingMin/2 or more on
	// average to run, Work.RunnableWait, or the kernel's CPU pressure was
	// at least DefaultCPUPressure, Work.CPUPressure), else
	// ReasonSafePoint: a goroutine slow to reach a safe point (a long
	// non-preemptible loop, a large memmove, a cgo or syscall transition)
	// holds every other one up. Value and Threshold are that share.
	DetectorStoppingLatency = "stopping_latency"
	// DetectorAssistHeavy fires when mark assists, GC work charged to
	// allocating goroutines, take at least DefaultAssistFraction of all
	// the CPU over the rate window (WithAssistHeavy): the mutators pay
	// for marking, in latency. Value and Threshold are that fraction.
	DetectorAssistHeavy = "assist_heavy"
)

// Defaults of the cause detectors; each can be changed with the option
// named in its comment.
const (
	// DefaultAllocationCyclesPerMinute is allocation_driven's rate of GC
	// cycles (WithAllocationDriven): one a second. The runtime's 4 MiB
	// minimum heap makes a program that allocates 4 MiB/s on a small
	// live heap run about this many.
	DefaultAllocationCyclesPerMinute = 60
	// DefaultAllocationGCCPU is the share of the CPU the GC must take for
	// allocation_driven to fire (WithAllocationDriven), unless the
	// program allocates DefaultAllocationBytesPerSecond: frequent cycles
	// that cost little are no trouble.
	DefaultAllocationGCCPU = 0.05
	// DefaultAllocationBytesPerSecond is the allocation rate at which
	// frequent cycles are allocation-driven whatever the GC's share of
	// the CPU (WithAllocationRate): on a machine with many cores the GC
	// takes a small share of a large total, and at 64 MiB/s the program's
	// own allocation is the lever.
	DefaultAllocationBytesPerSecond = 64 << 20

	// DefaultCauseFireAfter is how long a cause's condition must hold
	// before it fires, and DefaultCauseHold how long it must not hold
	// before it resolves, and the least time between two of its changes
	// (WithCauseHysteresis): at most one transition a minute for each.
	DefaultCauseFireAfter = 10 * time.Second
	DefaultCauseHold      = time.Minute

	// DefaultCPUPressure is the kernel's CPU pressure (the share of time
	// some thread waited for a CPU since the previous read: Work.CPUPressure)
	// from which stopping_latency is put down to CPU starvation.
	DefaultCPUPressure = 0.10

	// DefaultLiveHeapGrowthCycles is how many consecutive GC cycles the
	// live heap must rise over for live_heap_growth (WithLiveHeapGrowth).
	DefaultLiveHeapGrowthCycles = 4
	// DefaultLiveHeapGrowth is the growth over those cycles, as a
	// fraction of where they began, that fires live_heap_growth
	// (WithLiveHeapGrowth).
	DefaultLiveHeapGrowth = 0.10
	// DefaultLiveHeapBytes is the live heap above which any steady rise
	// fires live_heap_growth, however small as a fraction
	// (WithLiveHeapGrowth): the source article's heap_inuse > 500 MB.
	DefaultLiveHeapBytes = 500 << 20

	// DefaultMemoryLimitSqueeze is how many times below GOGC's goal the
	// memory limit must hold the heap goal for memory_limit_pressure
	// (WithMemoryLimitPressure). The 5% margin absorbs the moment between
	// the readings.
	DefaultMemoryLimitSqueeze = 1.05

	// DefaultStoppingShare is stopping_latency's share of stop-the-world
	// time spent stopping (WithStoppingLatency). A healthy program stops
	// the world in a few microseconds and spends most of a pause stopped.
	DefaultStoppingShare = 0.5
	// DefaultStoppingMin is the least mean time to stop the world, per
	// pause, for stopping_latency (WithStoppingLatency), so that a share
	// of microseconds does not fire. Stopping takes microseconds on a
	// healthy program; a millisecond is a goroutine that does not yield,
	// or threads the OS does not schedule (an overloaded node, a CPU
	// limit throttling the process).
	DefaultStoppingMin = time.Millisecond

	// DefaultAssistFraction is assist_heavy's share of all the CPU taken
	// by mark assists (WithAssistHeavy).
	DefaultAssistFraction = 0.05
)

// liveGrowthMinBytes is the least growth in bytes live_heap_growth fires
// on: a program warming up from a few hundred kilobytes grows by large
// fractions that are nobody's trouble, and below the runtime's 4 MiB
// minimum heap the goal, and so the GC's pace, does not move.
const liveGrowthMinBytes = 4 << 20

// numCauses is how many cause detectors there are from detAllocation on;
// forced_gc, which comes before, is one too.
const numCauses = numDetectors - detAllocation

// isCause reports whether detector i is a cause.
func isCause(i int) bool { return i == detForced || i >= detAllocation }

// CauseDetectors returns the names of the cause detectors, in the order
// their Events are produced.
func CauseDetectors() []string {
	names := make([]string, 0, numCauses+1)
	for i := range numDetectors {
		if isCause(i) {
			names = append(names, detectorName(i))
		}
	}
	return names
}

// IsCause reports whether name is a cause detector's.
func IsCause(name string) bool {
	i := detectorIndex(name)
	return i >= 0 && isCause(i)
}

func (d *detectors) initCauses() {
	c := d.cfg
	d.st[detAllocation].threshold = c.allocCyclesPerMinute
	d.st[detLiveGrowth].threshold = c.liveGrowth
	d.st[detMemoryLimit].threshold = c.limitSqueeze
	d.st[detStopping].threshold = c.stoppingShare
	d.st[detAssist].threshold = c.assistFraction
}

// causes runs the cause detectors on the round's snapshot.
func (d *detectors) causes(s *Snapshot, evs *[numDetectors]Event, n int) int {
	c, wk, now := d.cfg, &s.Work, s.Time
	var cond [numCauses]bool
	var value [numCauses]float64
	var reason, fix [numCauses]string

	// The rates need a quarter of the rate window at least: two rounds a
	// millisecond apart with a GC cycle between them make 60 000 cycles
	// a minute, and the first round's lifetime figures say nothing of now.
	rated := wk.Window > 0 && wk.Window >= c.rateWindow/4

	// allocation_driven: frequent cycles nobody forced, that cost CPU or
	// come from a fast allocation rate.
	unforced := max(wk.CyclesPerMinute-wk.ForcedCyclesPerMinute, 0)
	value[0] = unforced
	cond[0] = rated && unforced >= c.allocCyclesPerMinute &&
		(s.GCCPUFraction >= c.allocGCCPU || wk.AllocBytesPerSecond >= c.allocBytesPerSecond)
	if cond[0] {
		fix[0] = allocationFix(s, unforced)
	}

	// live_heap_growth: rising over the window and the cycles, by enough.
	value[1] = wk.LiveGrowth
	grown := float64(s.HeapLive) * wk.LiveGrowth / (1 + wk.LiveGrowth) // bytes over the span
	cond[1] = wk.LiveRising && wk.LiveCycles >= c.liveCycles && wk.LiveSpan >= c.rateWindow/2 &&
		grown >= liveGrowthMinBytes && (wk.LiveGrowth >= c.liveGrowth || s.HeapLive >= c.liveBytes)

	// memory_limit_pressure: the limit holds the goal, or the limiter ran.
	value[2] = squeeze(s)
	cond[2] = value[2] >= c.limitSqueeze || wk.LimiterEngaged

	// stopping_latency: most of the pause spent stopping, and long; and
	// whether the threads were starved of CPU meanwhile.
	if wk.StopTheWorld > 0 {
		value[3] = wk.Stopping.Seconds() / wk.StopTheWorld.Seconds()
	}
	cond[3] = rated && wk.StopTheWorldCount > 0 && value[3] >= c.stoppingShare &&
		wk.Stopping >= c.stoppingMin*time.Duration(wk.StopTheWorldCount)
	// The reason is judged while the condition holds; a cause held
	// after it stopped keeps the reason it had (annotate keeps it).
	if cond[3] {
		wk.RunnableWait, wk.CPUPressure = d.starvation(now)
		reason[3] = ReasonSafePoint
		if wk.RunnableWait >= max(c.stoppingMin/2, minStarvedWait) || wk.CPUPressure >= DefaultCPUPressure {
			reason[3] = ReasonCPUStarvation
		}
	}

	// Frequent cycles under a memory limit that holds the goal are the
	// limit's doing: one cause, not two.
	cond[0] = cond[0] && !cond[2]

	// assist_heavy.
	value[4] = wk.AssistFraction
	cond[4] = rated && wk.AssistFraction >= c.assistFraction

	fix[1] = fixLiveGrowth
	fix[2] = fixMemoryLimit
	switch reason[3] {
	case ReasonSafePoint:
		fix[3] = fixSafePoint
	case ReasonCPUStarvation:
		fix[3] = fixStarvation
	}
	fix[4] = fixAssist

	for k := range numCauses {
		d.causeSince[k] = episode(cond[k], d.causeSince[k], now)
		i := detAllocation + k
		m := d.step(i, cond[k], value[k], d.causeSince[k], now, evs, n)
		d.annotate(i, reason[k], fix[k], evs[n:m])
		n = m
	}
	return n
}

// The fixes that need no number of the round's.
const (
	fixForced      = "remove the call, or make it rare: the runtime paces the GC itself, and each forced cycle marks the whole heap whether it needs it or not, and makes its caller wait for it"
	fixLiveGrowth  = "bound what the lines named keep (a cache's size, a map's keys, a slice kept past its use); if the growth is a warm-up, it stops"
	fixMemoryLimit = "raise the memory limit (GOMEMLIMIT, debug.SetMemoryLimit) if the host has the memory, or keep less: the GC runs to stay under it"
	fixSafePoint   = "find the goroutine that does not stop: a tight loop without calls, a large copy, a long cgo or system call; an execution trace (runtime/trace) shows which one ran through the stop"
	fixStarvation  = "give the process the CPU it needs (its CPU request and limit, a less busy node); GOMAXPROCS above the CPU it gets makes it worse"
	fixAssist      = "allocate less at the lines named, or give the GC more room (a higher GOGC, a memory limit) so that marking starts less often"
)

// annotate sets the reason and the fix of a firing cause's event, and of
// the event it just produced, if any; a resolving event keeps its
// episode's.
func (d *detectors) annotate(i int, reason, fix string, produced []Event) {
	st := &d.st[i]
	if !st.firing {
		return
	}
	if reason != "" {
		st.event.Reason = reason
	}
	if fix != "" {
		st.event.Fix = fix
	}
	for j := range produced {
		produced[j].Reason, produced[j].Fix = st.event.Reason, st.event.Fix
	}
}

// starvation returns how long runnable goroutines waited for a CPU on
// average, and the kernel's CPU pressure (negative when unknown), each
// since its previous read: read at most once an interval, and only while
// stopping_latency's condition holds, so the sampling round itself reads
// neither.
func (d *detectors) starvation(now time.Time) (time.Duration, float64) {
	if d.starvedAt.IsZero() || now.Sub(d.starvedAt) >= d.cfg.interval {
		elapsed := now.Sub(d.starvedAt)
		v, ok := d.cfg.pressure()
		d.pressure = -1
		if ok {
			d.pressure = pressureSince(d.pressureRead, v, elapsed)
			d.pressureRead = v
		} else {
			d.pressureRead = cpuPressure{}
		}
		w := d.cfg.runWait()
		d.runWait = waitSince(d.runWaitRead, w, elapsed)
		d.runWaitRead = w
		d.starvedAt = now
	}
	return d.runWait, d.pressure
}

// allocationFix is allocation_driven's advice. With a tiny live heap the
// GC runs every few MiB allocated whatever the program does, and GOGC (or
// a memory limit with GOGC off) is the lever: it says which value, and
// what it would give. Otherwise the allocating lines are.
func allocationFix(s *Snapshot, cyclesPerMinute float64) string {
	wk := &s.Work
	tiny := wk.GoalSetBy == GoalByHeapMinimum || s.HeapLive < tinyLiveHeap
	if !tiny || s.GOGC <= 0 || cyclesPerMinute <= 0 {
		return "allocate less at the lines named: reuse buffers, avoid copies and conversions, pool short-lived objects"
	}
	// Cycles come every (goal - live) bytes allocated. Raising GOGC from
	// g to 4g gives about four times the headroom, so a quarter of the
	// cycles, for about three times the headroom in heap.
	headroom := uint64(0)
	if s.HeapGoal > s.HeapLive {
		headroom = s.HeapGoal - s.HeapLive
	}
	g := s.GOGC * 4
	return fmt.Sprintf("the live heap is only %s, so the GC runs every %s allocated; GOGC=%d would run it about %.0f times a minute instead of %.0f, for about %s more heap; or set GOMEMLIMIT to what the process may use (for example %s) with GOGC=off",
		mib(s.HeapLive), mib(headroom), g, cyclesPerMinute/4, cyclesPerMinute, mib(3*headroom), mib(limitSuggestion(s.HeapLive)))
}

// minStarvedWait is the least mean wait of a runnable goroutine that is CPU
// starvation, whatever WithStoppingLatency's minimum (half of it counts):
// healthy programs wait microseconds.
const minStarvedWait = 100 * time.Microsecond

// tinyLiveHeap is the live heap under which allocation_driven suggests
// GOGC: twice the runtime's minimum heap.
const tinyLiveHeap = 2 * heapMinimum

// limitSuggestion is a memory limit to suggest for a tiny live heap: room
// for 64 MiB of garbage over the live heap, rounded up to 16 MiB.
func limitSuggestion(live uint64) uint64 {
	v := live + 64<<20
	return (v + 16<<20 - 1) / (16 << 20) * (16 << 20)
}

// mib formats bytes as MiB with one decimal, or KiB under one MiB.
func mib(b uint64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.0f KiB", math.Ceil(float64(b)/1024))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// Cause returns a cause detector's event in words, with the number that
// decided it and its threshold, e.g. "allocation-driven: 412 GC cycles a
// minute (threshold 60) ...". It returns "" for the other detectors, whose
// Detector, Value and Threshold say it all.
func (e Event) Cause() string {
	switch e.Detector {
	case DetectorForcedGC:
		return fmt.Sprintf("forced GC: %.0f cycles a minute forced by runtime.GC or debug.FreeOSMemory (threshold %.0f): the program collects when the runtime would not",
			e.Value, e.Threshold)
	case DetectorAllocationDriven:
		return fmt.Sprintf("allocation-driven: %.0f GC cycles a minute nobody forced (threshold %.0f): the program allocates fast enough to keep the GC running",
			e.Value, e.Threshold)
	case DetectorLiveHeapGrowth:
		return fmt.Sprintf("live-heap growth: the live heap grew %.0f%% over the latest window (threshold %.0f%%, or any steady rise of 4 MiB or more above 500 MiB): something keeps what it allocates, a cache or a leak",
			100*e.Value, 100*e.Threshold)
	case DetectorMemoryLimitPressure:
		if e.Value < e.Threshold {
			return "memory-limit pressure: the GC CPU limiter engaged within the window: the memory limit makes the GC run without pause, and the limiter lets the heap pass the limit to cap the GC's CPU"
		}
		if e.Value >= maxSqueeze {
			return "memory-limit pressure: GOGC is off and the memory limit alone sets the heap goal: the GC runs as often as the limit needs"
		}
		return fmt.Sprintf("memory-limit pressure: the memory limit holds the heap goal %.2fx below what GOGC would allow (threshold %.2fx): the GC runs early and often to stay under it",
			e.Value, e.Threshold)
	case DetectorStoppingLatency:
		if e.Reason == ReasonCPUStarvation {
			return fmt.Sprintf("CPU starvation: %.0f%% of the GC's stop-the-world time was spent stopping the world (threshold %.0f%%) while the process's threads waited for a CPU: the node or the container's CPU limit is short of CPU, not a goroutine of the program",
				100*e.Value, 100*e.Threshold)
		}
		return fmt.Sprintf("stopping latency: %.0f%% of the GC's stop-the-world time was spent stopping the world (threshold %.0f%%): a goroutine is slow to reach a safe point",
			100*e.Value, 100*e.Threshold)
	case DetectorAssistHeavy:
		return fmt.Sprintf("assist-heavy: mark assists took %.1f%% of the CPU (threshold %.1f%%): allocating goroutines pay for marking, in latency",
			100*e.Value, 100*e.Threshold)
	}
	return ""
}
