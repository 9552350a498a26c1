package memstats

import (
	"fmt"
	"time"
)

// The cause detectors: why the GC works hard. Each decides from
// Snapshot.Work (and the heap figures beside it) over the rate window, and
// its Event says the cause in words (Event.Cause) with the number that
// decided it. A healthy program fires none.
const (
	// DetectorAllocationDriven fires when GC cycles are frequent because
	// the program allocates fast: at least DefaultAllocationCyclesPerMinute
	// cycles a minute while the GC takes at least DefaultAllocationGCCPU
	// of the CPU, over the rate window (WithAllocationDriven). Value and
	// Threshold are cycles per minute. The allocating lines are the
	// heap profile's business (package heapprofile).
	DetectorAllocationDriven = "allocation_driven"
	// DetectorLiveHeapGrowth fires when the live heap rose over each of the
	// latest DefaultLiveHeapGrowthCycles cycles (a 2% dip allowed), by at
	// least 4 MiB, and either by DefaultLiveHeapGrowth of where it began or
	// while above DefaultLiveHeapBytes (WithLiveHeapGrowth): something
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
	// per pause on average (WithStoppingLatency): a goroutine slow to
	// reach a safe point (a long non-preemptible loop, a large memmove, a
	// cgo or syscall transition) holds every other one up. Value and
	// Threshold are that share.
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
	// allocation_driven to fire (WithAllocationDriven): frequent cycles
	// that cost little are no trouble.
	DefaultAllocationGCCPU = 0.05

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

// numCauses is how many cause detectors there are, from detAllocation on.
const numCauses = numDetectors - detAllocation

// CauseDetectors returns the names of the cause detectors, in the order
// their Events are produced.
func CauseDetectors() []string {
	names := make([]string, 0, numCauses)
	for i := detAllocation; i < numDetectors; i++ {
		names = append(names, detectorName(i))
	}
	return names
}

// IsCause reports whether name is a cause detector's.
func IsCause(name string) bool {
	i := detectorIndex(name)
	return i >= detAllocation
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

	// The rates need a quarter of the rate window at least: two rounds a
	// millisecond apart with a GC cycle between them make 60 000 cycles
	// a minute, and the first round's lifetime figures say nothing of now.
	rated := wk.Window > 0 && wk.Window >= c.rateWindow/4

	// allocation_driven: frequent cycles that cost CPU.
	value[0] = wk.CyclesPerMinute
	cond[0] = rated && wk.CyclesPerMinute >= c.allocCyclesPerMinute && s.GCCPUFraction >= c.allocGCCPU

	// live_heap_growth: rising over the cycles, by enough.
	value[1] = wk.LiveGrowth
	grown := float64(s.HeapLive) * wk.LiveGrowth / (1 + wk.LiveGrowth) // bytes since the first cycle
	cond[1] = wk.LiveRising && wk.LiveCycles >= c.liveCycles && grown >= liveGrowthMinBytes &&
		(wk.LiveGrowth >= c.liveGrowth || s.HeapLive >= c.liveBytes)

	// memory_limit_pressure: the limit holds the goal, or the limiter ran.
	value[2] = squeeze(s)
	cond[2] = value[2] >= c.limitSqueeze || wk.LimiterEngaged

	// stopping_latency: most of the pause spent stopping, and long.
	if wk.StopTheWorld > 0 {
		value[3] = wk.Stopping.Seconds() / wk.StopTheWorld.Seconds()
	}
	cond[3] = rated && wk.StopTheWorldCount > 0 && value[3] >= c.stoppingShare &&
		wk.Stopping >= c.stoppingMin*time.Duration(wk.StopTheWorldCount)

	// assist_heavy.
	value[4] = wk.AssistFraction
	cond[4] = rated && wk.AssistFraction >= c.assistFraction

	for k := range numCauses {
		d.causeSince[k] = episode(cond[k], d.causeSince[k], now)
		n = d.step(detAllocation+k, cond[k], value[k], d.causeSince[k], now, evs, n)
	}
	return n
}

// Cause returns a cause detector's event in words, with the number that
// decided it and its threshold, e.g. "allocation-driven: 412 GC cycles a
// minute (threshold 60) ...". It returns "" for the other detectors, whose
// Detector, Value and Threshold say it all.
func (e Event) Cause() string {
	switch e.Detector {
	case DetectorAllocationDriven:
		return fmt.Sprintf("allocation-driven: %.0f GC cycles a minute (threshold %.0f): the program allocates fast enough to keep the GC running; see the allocating sites",
			e.Value, e.Threshold)
	case DetectorLiveHeapGrowth:
		return fmt.Sprintf("live-heap growth: the live heap grew %.0f%% over the latest cycles (threshold %.0f%%): something keeps what it allocates; see the growing sites",
			100*e.Value, 100*e.Threshold)
	case DetectorMemoryLimitPressure:
		if e.Value < e.Threshold {
			return fmt.Sprintf("memory-limit pressure: the GC CPU limiter engaged (the heap goal is %.2fx below GOGC's, threshold %.2fx): the memory limit makes the GC run without pause",
				e.Value, e.Threshold)
		}
		if e.Value >= maxSqueeze {
			return "memory-limit pressure: GOGC is off and the memory limit alone sets the heap goal: the GC runs as often as the limit needs"
		}
		return fmt.Sprintf("memory-limit pressure: the memory limit holds the heap goal %.2fx below what GOGC would allow (threshold %.2fx): the GC runs early and often to stay under it",
			e.Value, e.Threshold)
	case DetectorStoppingLatency:
		return fmt.Sprintf("stopping latency: %.0f%% of the GC's stop-the-world time was spent stopping the world (threshold %.0f%%): a goroutine is slow to reach a safe point",
			100*e.Value, 100*e.Threshold)
	case DetectorAssistHeavy:
		return fmt.Sprintf("assist-heavy: mark assists took %.1f%% of the CPU (threshold %.1f%%): allocating goroutines pay for marking, in latency",
			100*e.Value, 100*e.Threshold)
	}
	return ""
}
