// Package memstats samples the Go runtime's garbage collector and its
// finalizer and cleanup queues without stopping the world, and watches the
// samples with detectors.
//
// A Sampler reads a fixed set of runtime/metrics (MetricNames) into a slice
// it built once, the per-cycle GC pause history from debug.ReadGCStats
// (which takes the heap lock, not the world), and, only if asked
// (WithReadMemStats), runtime.ReadMemStats at most once per
// WithReadMemStatsInterval, measuring what each call costs. It samples on
// an interval and on every GC cycle: a sentinel object whose finalizer
// re-arms itself wakes it, and the delay between the end of the cycle that
// queued the sentinel and the sentinel's run is the sentinel latency; a
// second sentinel does the same for cleanups (runtime.AddCleanup). The
// runtime drains its queue a batch at a time, from the batch's end, so a
// sentinel queued after a backlog can run first: the queue delay
// (Queue.Latency) therefore also estimates the backlog from the queue's
// length and its recent drain rate. A round allocates nothing.
//
// # Usage
//
//	s, err := memstats.New(memstats.WithInterval(time.Second))
//	if err != nil {
//		return err
//	}
//	cancel := s.Subscribe(func(e memstats.Event) {
//		slog.Warn("gc detector", "detector", e.Detector, "firing", e.Firing, "value", e.Value)
//	})
//	defer cancel()
//	if err := s.Start(); err != nil {
//		return err
//	}
//	defer s.Stop()
//	...
//	snap := s.Snapshot()
//	fmt.Println(snap.Finalizers.Length, snap.Finalizers.Latency, snap.PauseP99)
//
// Callers that manage their own goroutines use Run(ctx) instead of Start;
// Sample performs one round synchronously.
//
// # Lifecycle
//
// A Sampler runs once: idle after New, running after Start or Run, stopped
// after Stop or once a Run's context ends, for good. Start or Run on a
// running sampler returns an error wrapping ErrRunning; on a stopped one,
// an error wrapping ErrStopped (make a new Sampler). Stop is idempotent,
// works in any state, and returns once the sampling goroutine has ended.
// tracing.Reporter and the root package's Probe follow the same rules.
//
// # Concurrency
//
// All exported functions and methods are safe for concurrent use unless
// specified otherwise. A sampling round holds the sampler's lock; readers
// (Snapshot, SnapshotInto, Pauses, PausesSince, Active, LastMemStats) copy
// under it. Event handlers run on the goroutine that runs the round (the
// sampler's own goroutine once started) after the lock is released: they
// may call the sampler, and must be quick, since the sampler does not
// sample while they run. The sentinels' callbacks never block the
// runtime's finalizer and cleanup goroutines: they record a timestamp in
// atomics and wake the sampler with a non-blocking send, counting the
// wake-ups they drop (Snapshot.Drops).
//
// # Snapshot fields
//
//	Field                         Source
//	Time                          the Clock, at the start of the round
//	Samples                       rounds so far
//	Cycles                        /gc/cycles/total:gc-cycles
//	ForcedCycles                  /gc/cycles/forced:gc-cycles
//	HeapLive                      /gc/heap/live:bytes
//	HeapGoal                      /gc/heap/goal:bytes
//	GOGC                          /gc/gogc:percent (-1 when off)
//	MemoryLimit                   /gc/gomemlimit:bytes
//	Finalizers.Queued, Executed   /gc/finalizers/queued:finalizers, /gc/finalizers/executed:finalizers
//	Cleanups.Queued, Executed     /gc/cleanups/queued:cleanups, /gc/cleanups/executed:cleanups
//	*.Length                      Queued - Executed
//	*.GrowthPerSecond             change of Length over the latest interval
//	*.SentinelLatency             the finalizer (cleanup) sentinel against debug.ReadGCStats PauseEnd
//	*.DrainPerSecond              Δ Executed over the busy part of WithQueueWindow
//	*.FillPerSecond               Δ Queued over WithQueueWindow
//	*.Backlog                     Length ÷ DrainPerSecond, at least the time since Executed last moved
//	*.Latency                     the larger of Backlog and SentinelLatency (while it still applies)
//	PauseP50, PauseP99, PauseMax  debug.ReadGCStats Pause, over the latest WithPauseWindow cycles
//	PauseWindow                   cycles in that window
//	PausesMissed                  cycles the runtime's 256-cycle history lost between two rounds
//	GCCPUFraction                 Δ /cpu/classes/gc/total:cpu-seconds ÷ Δ /cpu/classes/total:cpu-seconds over WithRateWindow
//	ForcedPerMinute               Δ /gc/cycles/forced:gc-cycles over WithRateWindow
//	MCacheInuse                   /memory/classes/metadata/mcache/inuse:bytes
//	StopTheWorldGC                observations in /sched/pauses/total/gc:seconds
//	StopTheWorldOther             observations in /sched/pauses/total/other:seconds
//	ReadMemStats                  the sampler's own runtime.ReadMemStats calls and their cost
//	Drops                         sentinel wake-ups dropped while one was pending
//	PauseHistogram                every per-cycle pause seen (debug.ReadGCStats), in PauseBuckets
//	Work.CyclesPerMinute          Δ /gc/cycles/total:gc-cycles over WithRateWindow
//	Work.ForcedCyclesPerMinute    Δ /gc/cycles/forced:gc-cycles over the same span
//	Work.AllocBytesPerSecond      Δ /gc/heap/allocs:bytes over WithRateWindow
//	Work.*Fraction                Δ /cpu/classes/gc/mark/{assist,dedicated,idle}, /cpu/classes/gc/pause
//	                              ÷ Δ /cpu/classes/total over WithRateWindow
//	Work.StopTheWorld, Stopping   Δ /sched/pauses/total/gc:seconds, /sched/pauses/stopping/gc:seconds,
//	                              summed at bucket midpoints over WithRateWindow
//	Work.GOGCGoal, GoalSetBy      HeapLive, GOGC, /gc/scan/stack, /gc/scan/globals against HeapGoal, MemoryLimit
//	Work.LimiterLastEnabled       /gc/limiter/last-enabled:gc-cycle
//	Work.Scan*                    /gc/scan/heap:bytes, /gc/scan/stack:bytes, /gc/scan/globals:bytes
//	Work.Goroutines               /sched/goroutines:goroutines
//	Work.RunnableWait             Δ /sched/latencies:seconds (sum at bucket midpoints ÷ count) since its
//	                              previous read, read only while stopping_latency's condition holds
//	Work.CPUPressure              Δ "some" total ÷ Δ time of the cgroup's cpu.pressure, else /proc/pressure/cpu
//	                              (Linux; avg10 on the first read), read only while stopping_latency's condition holds
//	Work.Live*                    HeapLive at the ends of cycles, a point at most every WithRateWindow/32,
//	                              over the rate window and at least WithLiveHeapGrowth's cycles
//
// A metric the running Go does not support is skipped and its field stays
// zero.
//
// # Detectors
//
// Each detector fires an Event when its condition starts to hold and
// another when it stops; thresholds are options, defaults are constants:
//
//	finalizer_queue_stalled  a queue longer than DefaultQueueStalledLength, non-empty for
//	                         DefaultQueueStalledFor, that over DefaultQueueWindow drained
//	                         slower than it filled, or not at all (WithQueueStalled,
//	                         WithQueueWindow); idle time does not count as not draining
//	forced_gc                DefaultForcedGCPerMinute forced cycles or more within the rate
//	                         window, a sliding minute by default (WithForcedGC)
//	mcache_inuse             MCacheInuse above DefaultMCacheInuseBytes for DefaultMCacheInuseFor
//	                         (WithMCacheInuse); a fixed size per P, see DefaultMCacheInuseBytes
//	queue_latency            finalizer or cleanup queue delay (Latency) above DefaultQueueLatency
//	                         (WithQueueLatency)
//	finalizer_blocked        a watched finalizer or cleanup running for longer than
//	                         DefaultFinalizerBlocked (WithFinalizerBlocked); needs WithRunning;
//	                         Event.Kind and Event.Site name it
//
// The cause detectors say why the GC works hard, each in words with the
// number that decided it (Event.Cause) and what to change (Event.Fix); a
// healthy program fires none. forced_gc, above, is one of them:
//
//	allocation_driven        DefaultAllocationCyclesPerMinute GC cycles a minute or more that nobody
//	                         forced, while the GC takes DefaultAllocationGCCPU of the CPU or the program
//	                         allocates DefaultAllocationBytesPerSecond (WithAllocationDriven,
//	                         WithAllocationRate); with a tiny live heap, Fix gives the GOGC to set
//	live_heap_growth         the live heap rising over the rate window (half of it at least) and
//	                         DefaultLiveHeapGrowthCycles cycles, by 4 MiB and DefaultLiveHeapGrowth,
//	                         or above DefaultLiveHeapBytes (WithLiveHeapGrowth)
//	memory_limit_pressure    the memory limit holding the heap goal DefaultMemoryLimitSqueeze times
//	                         below GOGC's, or the GC CPU limiter enabled (WithMemoryLimitPressure)
//	stopping_latency         DefaultStoppingShare of stop-the-world time spent stopping, at least
//	                         DefaultStoppingMin per pause (WithStoppingLatency); Event.Reason says
//	                         CPU starvation or a goroutine slow to reach a safe point
//	assist_heavy             mark assists taking DefaultAssistFraction of the CPU (WithAssistHeavy)
//
// The rate-based ones judge the rate window once a quarter of it has been
// observed. Every cause moves with hysteresis (WithCauseHysteresis): it
// fires once its condition has held DefaultCauseFireAfter, resolves once
// it has not held for DefaultCauseHold, and changes state at most once per
// DefaultCauseHold, so a log of its events has at most one line a minute
// per cause. WithoutDetector turns one off. Time-based conditions follow the Clock
// (WithClock), so they can be tested without sleeping.
package memstats
