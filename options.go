package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/tracing"
)

// Defaults for the probe's options.
const (
	// DefaultInterval is how often the probe samples the runtime when no
	// GC cycle wakes it sooner.
	DefaultInterval = memstats.DefaultInterval
	// DefaultTopK is how many sites of each kind get series and report
	// entries of their own.
	DefaultTopK = 10
	// DefaultMinReadMemStatsInterval is the least time between two
	// runtime.ReadMemStats calls when WithReadMemStats is on.
	DefaultMinReadMemStatsInterval = memstats.DefaultMinReadMemStatsInterval
)

// Option configures a Probe. Options are validated by New and Start; a bad
// value is an error naming the option, never a panic.
type Option func(*config) error

type config struct {
	registerer     prometheus.Registerer
	tracerProvider trace.TracerProvider
	watcher        *finalizerwatch.Watcher
	interval       time.Duration
	topK           int
	listenAddr     string
	readMemStats   bool
	fullStacks     bool
	logger         *slog.Logger
	loggerSet      bool // WithLogger was given: detector events go there
	samplerOpts    []memstats.Option
	leakInterval   time.Duration
	pauseThreshold time.Duration
}

func defaultConfig() config {
	return config{
		registerer: prometheus.DefaultRegisterer,
		watcher:    finalizerwatch.Default,
		interval:   DefaultInterval,
		topK:       DefaultTopK,
		logger:     slog.New(slog.DiscardHandler),

		leakInterval:   tracing.DefaultLeakReportInterval,
		pauseThreshold: tracing.DefaultPauseThreshold,
	}
}

func (c *config) apply(opts []Option) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("probe: option %d is nil", i)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// WithRegisterer registers the probe's Prometheus collector on r instead of
// prometheus.DefaultRegisterer; with controller-runtime, pass
// sigs.k8s.io/controller-runtime/pkg/metrics.Registry.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("probe: WithRegisterer: nil Registerer")
		}
		c.registerer = r
		return nil
	}
}

// WithTracerProvider makes the probe's spans (leak reports, long GC
// pauses, detector events; see package tracing) use tp instead of the
// global tracer provider, which is a no-op until the program installs one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("probe: WithTracerProvider: nil TracerProvider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// WithWatcher makes the probe report the ledger of w instead of
// finalizerwatch.Default (the one the package-level SetFinalizer and
// AddCleanup count into).
func WithWatcher(w *finalizerwatch.Watcher) Option {
	return func(c *config) error {
		if w == nil {
			return errors.New("probe: WithWatcher: nil Watcher")
		}
		c.watcher = w
		return nil
	}
}

// WithInterval sets how often the runtime is sampled when no GC cycle wakes
// the probe sooner (default DefaultInterval). It must be at least a
// millisecond.
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("probe: WithInterval: must be at least 1ms, got %v", d)
		}
		c.interval = d
		return nil
	}
}

// WithTopK sets how many sites of each kind get Prometheus series and
// report entries of their own (default DefaultTopK, at most 1000); the rest
// are summed under site="other".
func WithTopK(k int) Option {
	return func(c *config) error {
		if k < 1 || k > 1000 {
			return fmt.Errorf("probe: WithTopK: must be in [1, 1000], got %d", k)
		}
		c.topK = k
		return nil
	}
}

// WithListenAddr makes the probe serve /metrics and
// /debug/pprof/finalizers itself on addr (such as "127.0.0.1:9090"), for
// programs that have no metrics server. The listener is unauthenticated:
// bind it to loopback or protect it; see the package documentation.
func WithListenAddr(addr string) Option {
	return func(c *config) error {
		if addr == "" {
			return errors.New("probe: WithListenAddr: empty address")
		}
		c.listenAddr = addr
		return nil
	}
}

// WithReadMemStats turns on runtime.ReadMemStats, at most once per
// DefaultMinReadMemStatsInterval. It stops the world on every call; the
// probe does not call it unless asked.
func WithReadMemStats(on bool) Option {
	return func(c *config) error {
		c.readMemStats = on
		return nil
	}
}

// WithFullStacks makes the watcher capture the full stack of every
// registration (see finalizerwatch.WithFullStacks) while the probe runs.
func WithFullStacks(on bool) Option {
	return func(c *config) error {
		c.fullStacks = on
		return nil
	}
}

// WithLogger makes the probe log to l: detector events firing and
// clearing (at Warn, always) and what goes wrong inside the probe. Without
// it detector events go to slog.Default() and internal errors are
// discarded; pass slog.New(slog.DiscardHandler) to silence both. With
// controller-runtime, pass its logger: slog.New(logr.ToSlogHandler(log)).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("probe: WithLogger: nil Logger")
		}
		c.logger, c.loggerSet = l, true
		return nil
	}
}

// WithSamplerOptions passes options to the probe's memstats.Sampler, such
// as detector thresholds.
func WithSamplerOptions(opts ...memstats.Option) Option {
	return func(c *config) error {
		c.samplerOpts = append(c.samplerOpts, opts...)
		return nil
	}
}

// WithLeakReportInterval sets how often the probe emits a
// gcprobe.leak_report span (default one minute, at least one second).
func WithLeakReportInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second {
			return fmt.Errorf("probe: WithLeakReportInterval: must be at least 1s, got %v", d)
		}
		c.leakInterval = d
		return nil
	}
}

// WithPauseThreshold sets the GC pause above which the probe emits a
// gcprobe.gc_pause span (default 10ms). It must be positive.
func WithPauseThreshold(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("probe: WithPauseThreshold: must be > 0, got %v", d)
		}
		c.pauseThreshold = d
		return nil
	}
}
