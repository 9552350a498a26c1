package tracing

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
)

// Defaults for a Reporter's options.
const (
	// DefaultLeakReportInterval is how often a running Reporter emits a
	// gcprobe.leak_report span (WithLeakReportInterval).
	DefaultLeakReportInterval = time.Minute
	// DefaultTopK is how many sites a leak report describes at most
	// (WithTopK): finalizerwatch.DefaultTopK, the one default of a
	// reader's top K.
	DefaultTopK = finalizerwatch.DefaultTopK
	// DefaultPauseThreshold is the shortest GC pause that gets a
	// gcprobe.gc_pause span (WithPauseThreshold).
	DefaultPauseThreshold = 10 * time.Millisecond
	// DefaultPausePollInterval is how often a running Reporter looks for
	// new GC pauses (WithPausePollInterval). The sampler keeps the pauses
	// of its latest memstats.DefaultHistory cycles, so polling once a
	// second misses none unless the program collects more often than that.
	DefaultPausePollInterval = time.Second
	// DefaultDetectorQueue is how many detector events wait at most for the
	// reporter's goroutine to turn them into spans; more are counted as
	// dropped (gcprobe.detector.dropped).
	DefaultDetectorQueue = 64
)

// PauseSource appends to dst the GC pauses of the cycles after since
// (Pause.Cycle > since), oldest first, and returns the extended slice: the
// shape of (*memstats.Sampler).PausesSince.
type PauseSource func(since uint64, dst []memstats.Pause) []memstats.Pause

// Option configures a Reporter. An Option rejects a bad value with an
// error, which New returns.
type Option func(*config) error

type config struct {
	provider       trace.TracerProvider
	watcher        *finalizerwatch.Watcher
	sampler        *memstats.Sampler
	pauses         PauseSource
	leakInterval   time.Duration
	pauseInterval  time.Duration
	topK           int
	pauseThreshold time.Duration
}

func defaultConfig() config {
	return config{
		watcher:        finalizerwatch.Default,
		leakInterval:   DefaultLeakReportInterval,
		pauseInterval:  DefaultPausePollInterval,
		topK:           DefaultTopK,
		pauseThreshold: DefaultPauseThreshold,
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("tracing: New: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	if c.provider == nil {
		// Read at New, not at package init: a program that installs
		// its provider before creating the reporter gets it. The
		// global provider delegates, so installing it later works too.
		c.provider = otel.GetTracerProvider()
	}
	if c.pauses == nil && c.sampler != nil {
		c.pauses = c.sampler.PausesSince
	}
	return nil
}

// WithTracerProvider sets the provider the reporter's tracer comes from
// (default otel.GetTracerProvider() at the time of New). tp must not be nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("tracing: WithTracerProvider: nil TracerProvider")
		}
		c.provider = tp
		return nil
	}
}

// WithWatcher makes leak reports describe the ledger of w instead of
// finalizerwatch.Default. w must not be nil.
func WithWatcher(w *finalizerwatch.Watcher) Option {
	return func(c *config) error {
		if w == nil {
			return errors.New("tracing: WithWatcher: nil Watcher")
		}
		c.watcher = w
		return nil
	}
}

// WithSampler connects the reporter to s: GC pauses come from
// s.PausesSince (unless WithPauseSource says otherwise), pause spans and
// leak reports carry the heap and queue figures of s.Snapshot, and s's
// detector events become gcprobe.detector spans while the reporter runs.
// Without a sampler there are no pause spans (unless WithPauseSource),
// no detector spans, and leak reports carry the watcher's ledger only.
// The reporter neither starts nor stops s: s samples only while its owner
// runs it (Start, Run or Sample). s must not be nil.
func WithSampler(s *memstats.Sampler) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("tracing: WithSampler: nil Sampler")
		}
		c.sampler = s
		return nil
	}
}

// WithPauseSource makes the reporter read GC pauses from src instead of
// the sampler's PausesSince: for tests that feed synthetic pauses, or for
// a pause history kept elsewhere. src must not be nil.
func WithPauseSource(src PauseSource) Option {
	return func(c *config) error {
		if src == nil {
			return errors.New("tracing: WithPauseSource: nil PauseSource")
		}
		c.pauses = src
		return nil
	}
}

// WithLeakReportInterval sets how often a running reporter emits a
// gcprobe.leak_report span (default DefaultLeakReportInterval). d must be
// positive.
func WithLeakReportInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("tracing: WithLeakReportInterval: must be > 0, got %v", d)
		}
		c.leakInterval = d
		return nil
	}
}

// WithPausePollInterval sets how often a running reporter looks for new
// GC pauses (default DefaultPausePollInterval). d must be positive.
func WithPausePollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("tracing: WithPausePollInterval: must be > 0, got %v", d)
		}
		c.pauseInterval = d
		return nil
	}
}

// WithTopK sets how many sites a leak report describes at most (default
// DefaultTopK): the top K of finalizerwatch's Read, which the report
// describes as Read returns them. k must be at least 1
// (finalizerwatch.CheckTopK).
func WithTopK(k int) Option {
	return func(c *config) error {
		if err := finalizerwatch.CheckTopK(k); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		c.topK = k
		return nil
	}
}

// WithPauseThreshold sets the shortest GC pause that gets a gcprobe.gc_pause
// span (default DefaultPauseThreshold). Zero reports every pause. d must
// not be negative.
func WithPauseThreshold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("tracing: WithPauseThreshold: must be >= 0, got %v", d)
		}
		c.pauseThreshold = d
		return nil
	}
}
