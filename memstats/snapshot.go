package memstats

import "time"

// Snapshot is the sampler's picture after one sampling round. The table in
// the package documentation says where each field comes from.
type Snapshot struct {
	// Time is when the round ran, by the sampler's Clock. Zero before the
	// first round.
	Time time.Time
	// Samples counts the rounds so far.
	Samples uint64

	// Cycles is the number of completed GC cycles.
	Cycles uint64
	// ForcedCycles is how many of them were forced (runtime.GC,
	// debug.FreeOSMemory).
	ForcedCycles uint64
	// HeapLive is the heap marked live by the previous GC cycle, in bytes.
	HeapLive uint64
	// HeapGoal is the heap size the GC aims to finish the current cycle
	// at, in bytes.
	HeapGoal uint64
	// GOGC is the GC percentage (GOGC, debug.SetGCPercent); -1 when off.
	GOGC int64
	// MemoryLimit is the memory limit (GOMEMLIMIT,
	// debug.SetMemoryLimit) in bytes; math.MaxInt64 when unset.
	MemoryLimit uint64

	// Finalizers is the queue of finalizers (runtime.SetFinalizer).
	Finalizers Queue
	// Cleanups is the queue of cleanups (runtime.AddCleanup).
	Cleanups Queue

	// PauseP50, PauseP99 and PauseMax summarise the per-cycle pauses of
	// the latest PauseWindow cycles (nearest rank).
	PauseP50, PauseP99, PauseMax time.Duration
	// PauseWindow is how many cycles the pause summary covers: the
	// configured window, or fewer while the history fills.
	PauseWindow int
	// PausesMissed counts cycles whose pause the sampler never saw
	// because more cycles than the runtime remembers (256) passed between
	// two rounds.
	PausesMissed uint64

	// GCCPUFraction is the share of the process's CPU time the GC used
	// over the rate window, in [0, 1]. The runtime updates its CPU
	// accounting at GC cycle boundaries, so the fraction covers the
	// cycles that ended within the window.
	GCCPUFraction float64
	// ForcedPerMinute is the rate of forced GC cycles over the rate
	// window. While less than a window has been observed it is the count
	// so far, never an extrapolation.
	ForcedPerMinute float64

	// MCacheInuse is the memory used by the per-P allocation caches, in
	// bytes.
	MCacheInuse uint64

	// StopTheWorldGC and StopTheWorldOther count the program's
	// stop-the-world pauses since it started, for the GC and for anything
	// else (runtime.ReadMemStats, goroutine profiles, ...). In its default
	// mode the sampler adds to neither.
	StopTheWorldGC, StopTheWorldOther uint64

	// Work is what the GC did over the rate window and what set its pace:
	// CPU by class, stop-the-world time split into stopping and stopped,
	// allocation rate, what set the heap goal, scan work, live-heap
	// growth. The cause detectors decide from it.
	Work Work

	// ReadMemStats describes the sampler's own runtime.ReadMemStats calls.
	ReadMemStats ReadMemStatsInfo

	// Drops counts sentinel wake-ups dropped because the sampler had one
	// pending already; their cycles are still sampled.
	Drops uint64

	// PauseHistogram is the cumulative histogram of every per-cycle pause
	// the sampler has seen.
	PauseHistogram Histogram
}

// Queue describes the finalizer or the cleanup queue.
type Queue struct {
	// Queued and Executed are the runtime's totals since the program
	// started.
	Queued, Executed uint64
	// Length is Queued - Executed: queued and not yet run (approximate:
	// the two counts are read a moment apart).
	Length uint64
	// GrowthPerSecond is how fast Length changed over the latest sampling
	// interval; negative while the queue drains.
	GrowthPerSecond float64
	// Latency is the delay a callback queued now would wait: the larger
	// of Backlog and SentinelLatency, the latter only while it still
	// describes the queue (an overdue sentinel always does; a finished
	// one until the queue is next seen empty). Zero once the queue has
	// drained, whether or not a GC cycle ran since.
	Latency time.Duration
	// SentinelLatency is the sampler's sentinel as measured: how long
	// after the end of the GC cycle that queued it the sentinel ran, or,
	// while one is overdue, how late it is so far. Zero unless the
	// sampler runs (Start or Run). The runtime drains a batch from its
	// end, so a sentinel queued after a backlog can run first: this
	// alone can read microseconds while thousands of callbacks wait.
	SentinelLatency time.Duration
	// Backlog estimates how long the queue now takes to drain: Length
	// divided by DrainPerSecond, and at least as long as the queue has
	// been non-empty without any execution. Zero when the queue is empty
	// or no drain rate is known yet (the round that first sees it full).
	Backlog time.Duration
	// DrainPerSecond is the rate at which callbacks ran over the queue
	// window (WithQueueWindow), counting only the time the queue was not
	// empty. The runtime counts executions a block (about a hundred) at a
	// time, so over short spans it moves in steps.
	DrainPerSecond float64
	// FillPerSecond is the rate at which callbacks were queued over the
	// queue window, divided by the whole window.
	FillPerSecond float64
}

// ReadMemStatsInfo describes the sampler's own runtime.ReadMemStats calls,
// which stop the world, so that their cost is visible.
type ReadMemStatsInfo struct {
	// Enabled reports WithReadMemStats(true).
	Enabled bool
	// Calls counts the calls so far.
	Calls uint64
	// Last is when the latest call was made, by the sampler's Clock.
	Last time.Time
	// LastDuration is how long the latest call took (wall time).
	LastDuration time.Duration
	// TotalDuration is how long all calls took together.
	TotalDuration time.Duration
}
