package memstats

import (
	"runtime/metrics"
	"time"
)

// The fixed set of runtime/metrics the sampler reads, by index into the
// []metrics.Sample slice it builds once in newSamples. Indices rather than a
// map keep a round allocation-free and branch-cheap.
const (
	idxPausesGC           = iota // /sched/pauses/total/gc:seconds
	idxPausesOther               // /sched/pauses/total/other:seconds
	idxCycles                    // /gc/cycles/total:gc-cycles
	idxCyclesForced              // /gc/cycles/forced:gc-cycles
	idxHeapLive                  // /gc/heap/live:bytes
	idxHeapGoal                  // /gc/heap/goal:bytes
	idxFinalizersQueued          // /gc/finalizers/queued:finalizers
	idxFinalizersExecuted        // /gc/finalizers/executed:finalizers
	idxCleanupsQueued            // /gc/cleanups/queued:cleanups
	idxCleanupsExecuted          // /gc/cleanups/executed:cleanups
	idxCPUGC                     // /cpu/classes/gc/total:cpu-seconds
	idxCPUTotal                  // /cpu/classes/total:cpu-seconds
	idxGOGC                      // /gc/gogc:percent
	idxMemoryLimit               // /gc/gomemlimit:bytes
	idxMCacheInuse               // /memory/classes/metadata/mcache/inuse:bytes
	// The GC's work, for Snapshot.Work and the cause detectors (cause.go).
	idxStoppingGC   // /sched/pauses/stopping/gc:seconds
	idxCPUAssist    // /cpu/classes/gc/mark/assist:cpu-seconds
	idxCPUDedicated // /cpu/classes/gc/mark/dedicated:cpu-seconds
	idxCPUIdle      // /cpu/classes/gc/mark/idle:cpu-seconds
	idxCPUPause     // /cpu/classes/gc/pause:cpu-seconds
	idxAllocBytes   // /gc/heap/allocs:bytes
	idxLimiterLast  // /gc/limiter/last-enabled:gc-cycle
	idxScanHeap     // /gc/scan/heap:bytes
	idxScanStack    // /gc/scan/stack:bytes
	idxScanGlobals  // /gc/scan/globals:bytes
	idxGoroutines   // /sched/goroutines:goroutines
	numMetrics
)

// newSamples returns the sample slice the sampler reuses for every round.
// It is a function rather than a package-level table so that the package
// holds no global state.
func newSamples() []metrics.Sample {
	s := make([]metrics.Sample, numMetrics)
	s[idxPausesGC].Name = "/sched/pauses/total/gc:seconds"
	s[idxPausesOther].Name = "/sched/pauses/total/other:seconds"
	s[idxCycles].Name = "/gc/cycles/total:gc-cycles"
	s[idxCyclesForced].Name = "/gc/cycles/forced:gc-cycles"
	s[idxHeapLive].Name = "/gc/heap/live:bytes"
	s[idxHeapGoal].Name = "/gc/heap/goal:bytes"
	s[idxFinalizersQueued].Name = "/gc/finalizers/queued:finalizers"
	s[idxFinalizersExecuted].Name = "/gc/finalizers/executed:finalizers"
	s[idxCleanupsQueued].Name = "/gc/cleanups/queued:cleanups"
	s[idxCleanupsExecuted].Name = "/gc/cleanups/executed:cleanups"
	s[idxCPUGC].Name = "/cpu/classes/gc/total:cpu-seconds"
	s[idxCPUTotal].Name = "/cpu/classes/total:cpu-seconds"
	s[idxGOGC].Name = "/gc/gogc:percent"
	s[idxMemoryLimit].Name = "/gc/gomemlimit:bytes"
	s[idxMCacheInuse].Name = "/memory/classes/metadata/mcache/inuse:bytes"
	s[idxStoppingGC].Name = "/sched/pauses/stopping/gc:seconds"
	s[idxCPUAssist].Name = "/cpu/classes/gc/mark/assist:cpu-seconds"
	s[idxCPUDedicated].Name = "/cpu/classes/gc/mark/dedicated:cpu-seconds"
	s[idxCPUIdle].Name = "/cpu/classes/gc/mark/idle:cpu-seconds"
	s[idxCPUPause].Name = "/cpu/classes/gc/pause:cpu-seconds"
	s[idxAllocBytes].Name = "/gc/heap/allocs:bytes"
	s[idxLimiterLast].Name = "/gc/limiter/last-enabled:gc-cycle"
	s[idxScanHeap].Name = "/gc/scan/heap:bytes"
	s[idxScanStack].Name = "/gc/scan/stack:bytes"
	s[idxScanGlobals].Name = "/gc/scan/globals:bytes"
	s[idxGoroutines].Name = "/sched/goroutines:goroutines"
	return s
}

// MetricNames returns the names of the runtime/metrics the sampler reads.
// A name the running Go does not support is skipped at sampling time and
// its Snapshot field stays zero.
func MetricNames() []string {
	s := newSamples()
	names := make([]string, len(s))
	for i := range s {
		names[i] = s[i].Name
	}
	return names
}

// reading is one round's raw input: everything the derived signals and the
// detectors are computed from. Sample fills it from the runtime; tests fill
// it by hand (Sampler.read) to drive the detectors deterministically.
type reading struct {
	cycles, forced         uint64
	heapLive, heapGoal     uint64
	gogc                   int64
	memoryLimit            uint64
	mcacheInuse            uint64
	finQueued, finExecuted uint64
	clnQueued, clnExecuted uint64
	cpuGC, cpuTotal        float64
	stwGC, stwOther        uint64
	finLatency, clnLatency time.Duration
	finPending, clnPending bool   // the latency is an overdue sentinel's
	finRuns, clnRuns       uint64 // sentinel runs the latency is from

	// The GC's work (cause.go). The stop-the-world times are cumulative
	// seconds, summed by the sampler from the runtime's histograms.
	cpuAssist, cpuDedicated float64
	cpuIdle, cpuPause       float64
	allocBytes              uint64
	limiterLast             uint64
	scanHeap, scanStack     uint64
	scanGlobals, goroutines uint64
	stwStopSec, stwTotalSec float64
}

// u64 returns sample i as a uint64, or 0 when the running Go does not
// support the metric (metrics.KindBad) or reports another kind.
func u64(s []metrics.Sample, i int) uint64 {
	if s[i].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[i].Value.Uint64()
}

// f64 is u64 for float64 metrics.
func f64(s []metrics.Sample, i int) float64 {
	if s[i].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[i].Value.Float64()
}

// histCount returns the total number of observations in histogram sample i,
// or 0 when the metric is unsupported. Float64Histogram reuses the counts
// slice from one metrics.Read to the next, so this allocates nothing.
func histCount(s []metrics.Sample, i int) uint64 {
	if s[i].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range s[i].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

// fillFromMetrics copies the runtime/metrics part of a round into r.
func fillFromMetrics(s []metrics.Sample, r *reading) {
	r.stwGC = histCount(s, idxPausesGC)
	r.stwOther = histCount(s, idxPausesOther)
	r.cycles = u64(s, idxCycles)
	r.forced = u64(s, idxCyclesForced)
	r.heapLive = u64(s, idxHeapLive)
	r.heapGoal = u64(s, idxHeapGoal)
	r.finQueued = u64(s, idxFinalizersQueued)
	r.finExecuted = u64(s, idxFinalizersExecuted)
	r.clnQueued = u64(s, idxCleanupsQueued)
	r.clnExecuted = u64(s, idxCleanupsExecuted)
	r.cpuGC = f64(s, idxCPUGC)
	r.cpuTotal = f64(s, idxCPUTotal)
	// /gc/gogc:percent carries the runtime's int32 gcPercent converted to
	// uint64, so GOGC=off (-1) arrives as MaxUint64; the conversion back to
	// int64 restores -1.
	r.gogc = int64(u64(s, idxGOGC))
	r.memoryLimit = u64(s, idxMemoryLimit)
	r.mcacheInuse = u64(s, idxMCacheInuse)
	r.cpuAssist = f64(s, idxCPUAssist)
	r.cpuDedicated = f64(s, idxCPUDedicated)
	r.cpuIdle = f64(s, idxCPUIdle)
	r.cpuPause = f64(s, idxCPUPause)
	r.allocBytes = u64(s, idxAllocBytes)
	r.limiterLast = u64(s, idxLimiterLast)
	r.scanHeap = u64(s, idxScanHeap)
	r.scanStack = u64(s, idxScanStack)
	r.scanGlobals = u64(s, idxScanGlobals)
	r.goroutines = u64(s, idxGoroutines)
}
