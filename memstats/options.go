package memstats

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults. Each can be changed with the option named in its comment.
const (
	// DefaultInterval is how often the sampler samples when no GC cycle
	// wakes it sooner (WithInterval).
	DefaultInterval = time.Second

	// DefaultHistory is how many of the latest GC cycles' pauses the
	// sampler keeps for Pauses and PausesSince (WithHistory). It matches
	// the depth of the runtime's own pause history.
	DefaultHistory = 256

	// MaxHistory bounds WithHistory so that the pause history stays small.
	MaxHistory = 1 << 16

	// DefaultPauseWindow is how many of the latest cycles PauseP50,
	// PauseP99 and PauseMax summarise (WithPauseWindow). When the history
	// is shorter, the window is the whole history.
	DefaultPauseWindow = 100

	// DefaultRateWindow is the trailing window over which GCCPUFraction and
	// ForcedPerMinute are computed (WithRateWindow).
	DefaultRateWindow = time.Minute

	// DefaultMinReadMemStatsInterval is the least time between two calls of
	// runtime.ReadMemStats when WithReadMemStats(true) is set
	// (WithReadMemStatsInterval).
	DefaultMinReadMemStatsInterval = 15 * time.Second

	// MinReadMemStatsInterval is the hard floor of WithReadMemStatsInterval.
	// runtime.ReadMemStats stops the world; at one call a second its
	// pause (tens of microseconds on a small heap) stays well under 0.1% of
	// wall time, while sampling faster than that buys nothing that
	// runtime/metrics does not already give without stopping the world.
	MinReadMemStatsInterval = time.Second

	// DefaultQueueStalledLength is the finalizer_queue_stalled detector's
	// queue length threshold (WithQueueStalled).
	DefaultQueueStalledLength = 1000

	// DefaultQueueStalledFor is how long the queue must have been
	// non-empty, over its threshold, before finalizer_queue_stalled may
	// fire (WithQueueStalled). With the default interval it amounts to
	// "between two interval samples"; it keeps the samples a GC cycle
	// triggers, which can be a millisecond apart, from judging a drain
	// rate they cannot measure yet.
	DefaultQueueStalledFor = time.Second

	// DefaultQueueWindow is the window over which a queue's drain and
	// fill rates are measured, for Queue.Backlog, Queue.Latency and
	// finalizer_queue_stalled (WithQueueWindow).
	DefaultQueueWindow = 10 * time.Second

	// DefaultFinalizerBlocked is how long a watched finalizer or cleanup
	// may run before finalizer_blocked fires (WithFinalizerBlocked).
	DefaultFinalizerBlocked = time.Second

	// DefaultForcedGCPerMinute is the forced_gc detector's threshold:
	// it fires at this many forced cycles (runtime.GC,
	// debug.FreeOSMemory) per minute or more (WithForcedGC).
	DefaultForcedGCPerMinute = 5

	// DefaultMCacheInuseBytes is the mcache_inuse detector's threshold
	// (WithMCacheInuse), the source's 2 MiB. It is kept for fidelity, and
	// on purpose it fires on no ordinary machine: the runtime's
	// /memory/classes/metadata/mcache/inuse:bytes is one fixed-size
	// mcache per P (2 296 bytes each on Go 1.26, amd64), whatever the
	// load, so 2 MiB takes about 914 Ps (GOMAXPROCS). A threshold scaled
	// per P would measure that struct's size, not allocation pressure. Set
	// a lower value to watch for GOMAXPROCS growing, or for mcaches
	// leaking in a future runtime.
	DefaultMCacheInuseBytes = 2 << 20

	// DefaultMCacheInuseFor is how long mcache in-use memory must stay over
	// its threshold before mcache_inuse fires (WithMCacheInuse).
	DefaultMCacheInuseFor = 30 * time.Second

	// DefaultQueueLatency is the queue_latency detector's threshold
	// (WithQueueLatency).
	DefaultQueueLatency = time.Second
)

// ErrInvalidOption is wrapped by every error New returns for a bad option
// value; errors.As with *OptionError tells which option.
var ErrInvalidOption = errors.New("memstats: invalid option")

// OptionError reports an option New rejected.
type OptionError struct {
	// Option is the option's function name, e.g. "WithInterval".
	Option string
	// Reason says what is wrong with the value.
	Reason string
}

// Error returns e.g. "memstats: WithInterval: interval must be > 0, got -1s".
func (e *OptionError) Error() string {
	return "memstats: " + e.Option + ": " + e.Reason
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

func optionErr(option, format string, args ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)}
}

// An Option configures a Sampler. Options are validated by New: a bad
// value, or a nil Option, is an *OptionError naming it.
type Option func(*config) error

// config is what the options set; New validates the combination.
type config struct {
	clock             Clock
	interval          time.Duration
	history           int
	pauseWindow       int
	pauseWindowSet    bool
	pauseBuckets      []float64
	rateWindow        time.Duration
	readMemStats      bool
	readMemStatsEvery time.Duration
	stalledLength     uint64
	stalledFor        time.Duration
	forcedPerMinute   float64
	mcacheBytes       uint64
	mcacheFor         time.Duration
	queueLatency      time.Duration
	disabled          [numDetectors]bool
	queueWindow       time.Duration
	running           RunningFunc
	blockedAfter      time.Duration

	// The cause detectors (cause_detectors.go).
	allocCyclesPerMinute float64
	allocGCCPU           float64
	liveCycles           int
	liveGrowth           float64
	liveBytes            uint64
	limitSqueeze         float64
	stoppingShare        float64
	stoppingMin          time.Duration
	assistFraction       float64
	allocBytesPerSecond  float64
	causeFireAfter       time.Duration
	causeHold            time.Duration
	// pressure reads the kernel's CPU pressure (pressure.go); a test's
	// in tests.
	pressure func() (cpuPressure, bool)
	// runWait reads the runtime's scheduling latencies (pressure.go); a
	// test's in tests.
	runWait func() runWaitTotal
}

func defaultConfig() config {
	return config{
		clock:             systemClock{},
		interval:          DefaultInterval,
		history:           DefaultHistory,
		pauseWindow:       DefaultPauseWindow,
		pauseBuckets:      PauseBuckets,
		rateWindow:        DefaultRateWindow,
		readMemStatsEvery: DefaultMinReadMemStatsInterval,
		stalledLength:     DefaultQueueStalledLength,
		stalledFor:        DefaultQueueStalledFor,
		forcedPerMinute:   DefaultForcedGCPerMinute,
		mcacheBytes:       DefaultMCacheInuseBytes,
		mcacheFor:         DefaultMCacheInuseFor,
		queueLatency:      DefaultQueueLatency,
		queueWindow:       DefaultQueueWindow,
		blockedAfter:      DefaultFinalizerBlocked,

		allocCyclesPerMinute: DefaultAllocationCyclesPerMinute,
		allocGCCPU:           DefaultAllocationGCCPU,
		liveCycles:           DefaultLiveHeapGrowthCycles,
		liveGrowth:           DefaultLiveHeapGrowth,
		liveBytes:            DefaultLiveHeapBytes,
		limitSqueeze:         DefaultMemoryLimitSqueeze,
		stoppingShare:        DefaultStoppingShare,
		stoppingMin:          DefaultStoppingMin,
		assistFraction:       DefaultAssistFraction,
		allocBytesPerSecond:  DefaultAllocationBytesPerSecond,
		causeFireAfter:       DefaultCauseFireAfter,
		causeHold:            DefaultCauseHold,
		pressure:             readCPUPressure,
		runWait:              newRunWaitReader(),
	}
}

// apply applies opts in order. A nil Option is an error, as in every gcprobe
// package: skipping it would hide a caller's bug.
func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return optionErr("New", "nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// validate checks what no single option can: how options combine.
func (c *config) validate() error {
	if !c.pauseWindowSet && c.pauseWindow > c.history {
		c.pauseWindow = c.history
	}
	if c.pauseWindow > c.history {
		return optionErr("WithPauseWindow", "window of %d cycles exceeds the history of %d (WithHistory)", c.pauseWindow, c.history)
	}
	return nil
}

// WithClock makes the sampler read time from c instead of package time.
func WithClock(c Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return optionErr("WithClock", "clock must not be nil")
		}
		cfg.clock = c
		return nil
	}
}

// WithInterval sets how often the background goroutine samples when no GC
// cycle wakes it sooner. Default DefaultInterval.
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionErr("WithInterval", "interval must be > 0, got %v", d)
		}
		c.interval = d
		return nil
	}
}

// WithHistory sets how many of the latest GC cycles' pauses are kept for
// Pauses and PausesSince, between 1 and MaxHistory. Default DefaultHistory.
func WithHistory(cycles int) Option {
	return func(c *config) error {
		if cycles < 1 || cycles > MaxHistory {
			return optionErr("WithHistory", "history must be between 1 and %d cycles, got %d", MaxHistory, cycles)
		}
		c.history = cycles
		return nil
	}
}

// WithPauseWindow sets how many of the latest GC cycles PauseP50, PauseP99
// and PauseMax summarise; at least 1 and at most the history. Default
// DefaultPauseWindow.
func WithPauseWindow(cycles int) Option {
	return func(c *config) error {
		if cycles < 1 {
			return optionErr("WithPauseWindow", "window must be at least 1 cycle, got %d", cycles)
		}
		c.pauseWindow = cycles
		c.pauseWindowSet = true
		return nil
	}
}

// WithPauseBuckets sets the upper bounds, in seconds, of the buckets of
// Snapshot.PauseHistogram. They must be positive, finite and strictly
// increasing; the +Inf bucket is implied. Default PauseBuckets. The slice is
// copied.
func WithPauseBuckets(bounds []float64) Option {
	return func(c *config) error {
		if len(bounds) == 0 {
			return optionErr("WithPauseBuckets", "need at least one bound")
		}
		for i, b := range bounds {
			if !(b > 0) || math.IsInf(b, 0) {
				return optionErr("WithPauseBuckets", "bound %d must be positive and finite, got %v", i, b)
			}
			if i > 0 && b <= bounds[i-1] {
				return optionErr("WithPauseBuckets", "bounds must increase, got %v after %v", b, bounds[i-1])
			}
		}
		c.pauseBuckets = bounds
		return nil
	}
}

// WithRateWindow sets the trailing window over which GCCPUFraction and
// ForcedPerMinute are computed. Default DefaultRateWindow.
func WithRateWindow(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionErr("WithRateWindow", "window must be > 0, got %v", d)
		}
		c.rateWindow = d
		return nil
	}
}

// WithReadMemStats turns on runtime.ReadMemStats, which stops the world, at
// most once per WithReadMemStatsInterval. Off by default: in its default
// mode the sampler never stops the world.
func WithReadMemStats(on bool) Option {
	return func(c *config) error {
		c.readMemStats = on
		return nil
	}
}

// WithReadMemStatsInterval sets the least time between two calls of
// runtime.ReadMemStats; at least MinReadMemStatsInterval. Default
// DefaultMinReadMemStatsInterval. It has no effect without
// WithReadMemStats(true).
func WithReadMemStatsInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinReadMemStatsInterval {
			return optionErr("WithReadMemStatsInterval", "interval must be at least %v, got %v", MinReadMemStatsInterval, d)
		}
		c.readMemStatsEvery = d
		return nil
	}
}

// WithQueueStalled configures the finalizer_queue_stalled detector: it fires
// when a finalizer or cleanup queue is longer than length, has been
// non-empty for at least stalledFor (0 means: between the two latest
// samples), and over the queue window (WithQueueWindow) drained slower than
// it filled, or not at all. Defaults DefaultQueueStalledLength and
// DefaultQueueStalledFor.
func WithQueueStalled(length uint64, stalledFor time.Duration) Option {
	return func(c *config) error {
		if length == 0 {
			return optionErr("WithQueueStalled", "length must be > 0")
		}
		if stalledFor < 0 {
			return optionErr("WithQueueStalled", "duration must be >= 0, got %v", stalledFor)
		}
		c.stalledLength, c.stalledFor = length, stalledFor
		return nil
	}
}

// WithForcedGC configures the forced_gc detector: it fires when
// ForcedPerMinute reaches perMinute. Default DefaultForcedGCPerMinute.
func WithForcedGC(perMinute float64) Option {
	return func(c *config) error {
		if !(perMinute > 0) || math.IsInf(perMinute, 0) {
			return optionErr("WithForcedGC", "rate must be positive and finite, got %v", perMinute)
		}
		c.forcedPerMinute = perMinute
		return nil
	}
}

// WithMCacheInuse configures the mcache_inuse detector: it fires when
// MCacheInuse has stayed above bytes for at least sustained. Defaults
// DefaultMCacheInuseBytes and DefaultMCacheInuseFor. The runtime's figure is
// a fixed size per P (see DefaultMCacheInuseBytes), so with the default the
// detector fires only with about 914 Ps or more.
func WithMCacheInuse(bytes uint64, sustained time.Duration) Option {
	return func(c *config) error {
		if bytes == 0 {
			return optionErr("WithMCacheInuse", "bytes must be > 0")
		}
		if sustained < 0 {
			return optionErr("WithMCacheInuse", "duration must be >= 0, got %v", sustained)
		}
		c.mcacheBytes, c.mcacheFor = bytes, sustained
		return nil
	}
}

// WithQueueLatency configures the queue_latency detector: it fires when the
// finalizer or the cleanup queue latency exceeds threshold. Default
// DefaultQueueLatency.
func WithQueueLatency(threshold time.Duration) Option {
	return func(c *config) error {
		if threshold <= 0 {
			return optionErr("WithQueueLatency", "threshold must be > 0, got %v", threshold)
		}
		c.queueLatency = threshold
		return nil
	}
}

// WithoutDetector turns off the named detector (one of the Detector*
// constants).
func WithoutDetector(name string) Option {
	return func(c *config) error {
		i := detectorIndex(name)
		if i < 0 {
			return optionErr("WithoutDetector", "unknown detector %q", name)
		}
		c.disabled[i] = true
		return nil
	}
}

// WithQueueWindow sets the window over which each queue's drain and fill
// rates are measured (Queue.DrainPerSecond, FillPerSecond, Backlog) for the
// queue delay and finalizer_queue_stalled. Default DefaultQueueWindow.
func WithQueueWindow(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionErr("WithQueueWindow", "window must be > 0, got %v", d)
		}
		c.queueWindow = d
		return nil
	}
}

// WithRunning gives the sampler a source of the finalizers and cleanups
// running now, for the finalizer_blocked detector; without one that
// detector never fires. The probe passes one reading its
// finalizerwatch.Watcher. nil removes the source.
func WithRunning(fn RunningFunc) Option {
	return func(c *config) error {
		c.running = fn
		return nil
	}
}

// WithFinalizerBlocked configures the finalizer_blocked detector: it fires
// when a watched finalizer or cleanup has been running for longer than
// threshold. Default DefaultFinalizerBlocked.
func WithFinalizerBlocked(threshold time.Duration) Option {
	return func(c *config) error {
		if threshold <= 0 {
			return optionErr("WithFinalizerBlocked", "threshold must be > 0, got %v", threshold)
		}
		c.blockedAfter = threshold
		return nil
	}
}

// fraction checks that v is a fraction in (0, 1].
func fraction(option, what string, v float64) error {
	if !(v > 0 && v <= 1) {
		return optionErr(option, "%s must be in (0, 1], got %v", what, v)
	}
	return nil
}

// WithAllocationDriven configures the allocation_driven detector: it fires
// when, over the rate window, GC cycles nobody forced run at
// cyclesPerMinute or more while the GC takes at least gcCPU (a fraction in
// (0, 1]) of the CPU or the program allocates at the WithAllocationRate.
// Defaults DefaultAllocationCyclesPerMinute and DefaultAllocationGCCPU.
func WithAllocationDriven(cyclesPerMinute, gcCPU float64) Option {
	return func(c *config) error {
		if !(cyclesPerMinute > 0) || math.IsInf(cyclesPerMinute, 0) {
			return optionErr("WithAllocationDriven", "rate must be positive and finite, got %v", cyclesPerMinute)
		}
		if err := fraction("WithAllocationDriven", "GC CPU share", gcCPU); err != nil {
			return err
		}
		c.allocCyclesPerMinute, c.allocGCCPU = cyclesPerMinute, gcCPU
		return nil
	}
}

// WithAllocationRate sets the allocation rate, in bytes a second, at which
// frequent GC cycles are allocation_driven whatever the GC's share of the
// CPU (see WithAllocationDriven). Default DefaultAllocationBytesPerSecond.
func WithAllocationRate(bytesPerSecond float64) Option {
	return func(c *config) error {
		if !(bytesPerSecond > 0) || math.IsInf(bytesPerSecond, 0) {
			return optionErr("WithAllocationRate", "rate must be positive and finite, got %v", bytesPerSecond)
		}
		c.allocBytesPerSecond = bytesPerSecond
		return nil
	}
}

// WithCauseHysteresis sets how the cause detectors (CauseDetectors) move:
// a cause fires once its condition has held for fireAfter, resolves once
// it has not held for hold, and changes state at most once per hold.
// Both are between 0 (no hysteresis) and an hour. Defaults
// DefaultCauseFireAfter and DefaultCauseHold.
func WithCauseHysteresis(fireAfter, hold time.Duration) Option {
	return func(c *config) error {
		for _, d := range [...]time.Duration{fireAfter, hold} {
			if d < 0 || d > time.Hour {
				return optionErr("WithCauseHysteresis", "durations must be between 0 and 1h, got %v", d)
			}
		}
		c.causeFireAfter, c.causeHold = fireAfter, hold
		return nil
	}
}

// WithLiveHeapGrowth configures the live_heap_growth detector: it fires
// when the live heap rose over the rate window, spanning at least half of
// it and at least cycles cycles (between 2 and 64), by at least 4 MiB and
// either by growth (a fraction > 0: 0.1 is 10%) of where it began or while
// above largeBytes. Defaults
// DefaultLiveHeapGrowthCycles, DefaultLiveHeapGrowth and
// DefaultLiveHeapBytes.
func WithLiveHeapGrowth(cycles int, growth float64, largeBytes uint64) Option {
	return func(c *config) error {
		if cycles < 2 || cycles > maxLiveCycles {
			return optionErr("WithLiveHeapGrowth", "cycles must be between 2 and %d, got %d", maxLiveCycles, cycles)
		}
		if !(growth > 0) || math.IsInf(growth, 0) {
			return optionErr("WithLiveHeapGrowth", "growth must be positive and finite, got %v", growth)
		}
		if largeBytes == 0 {
			return optionErr("WithLiveHeapGrowth", "largeBytes must be > 0")
		}
		c.liveCycles, c.liveGrowth, c.liveBytes = cycles, growth, largeBytes
		return nil
	}
}

// WithMemoryLimitPressure configures the memory_limit_pressure detector:
// it fires when the memory limit holds the heap goal squeeze times (at
// least 1) below what GOGC alone would set, or the GC CPU limiter was
// enabled within the rate window. Default DefaultMemoryLimitSqueeze.
func WithMemoryLimitPressure(squeeze float64) Option {
	return func(c *config) error {
		if !(squeeze >= 1) || math.IsInf(squeeze, 0) {
			return optionErr("WithMemoryLimitPressure", "ratio must be at least 1 and finite, got %v", squeeze)
		}
		c.limitSqueeze = squeeze
		return nil
	}
}

// WithStoppingLatency configures the stopping_latency detector: it fires
// when, over the rate window, at least share (in (0, 1]) of the GC's
// stop-the-world time was spent stopping the world, taking at least
// minPerPause per pause on average. Defaults DefaultStoppingShare and
// DefaultStoppingMin.
func WithStoppingLatency(share float64, minPerPause time.Duration) Option {
	return func(c *config) error {
		if err := fraction("WithStoppingLatency", "share", share); err != nil {
			return err
		}
		if minPerPause < 0 {
			return optionErr("WithStoppingLatency", "duration must be >= 0, got %v", minPerPause)
		}
		c.stoppingShare, c.stoppingMin = share, minPerPause
		return nil
	}
}

// WithAssistHeavy configures the assist_heavy detector: it fires when mark
// assists take at least share (in (0, 1]) of all the CPU over the rate
// window. Default DefaultAssistFraction.
func WithAssistHeavy(share float64) Option {
	return func(c *config) error {
		if err := fraction("WithAssistHeavy", "share", share); err != nil {
			return err
		}
		c.assistFraction = share
		return nil
	}
}
