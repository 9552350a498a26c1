package k8sfinalizers

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Defaults for the watcher's options.
const (
	// DefaultStuckAfter is how long an object may stay terminating with a
	// finalizer before it is reported as stuck.
	DefaultStuckAfter = 5 * time.Minute
	// DefaultCheckInterval is how often the watcher looks for objects that
	// became stuck: a stuck object is reported at most this long after it
	// crossed the threshold.
	DefaultCheckInterval = 10 * time.Second
	// DefaultMaxFinalizerNames is how many distinct finalizer names per
	// GroupVersionKind get series of their own; later names are counted
	// under OtherFinalizer.
	DefaultMaxFinalizerNames = 32
	// DefaultMaxReportsPerCheck is how many stuck objects one check
	// reports (log lines, span events, StuckFunc calls); the rest wait for
	// the next checks, so that a mass of objects stuck at once becomes a
	// steady trickle rather than a flood.
	DefaultMaxReportsPerCheck = 100
)

// OtherFinalizer is the finalizer label of the finalizer names that come
// after the first WithMaxFinalizerNames names seen for a GroupVersionKind.
const OtherFinalizer = "other"

// DefaultRemovalBuckets returns the default upper bounds, in seconds, of the
// gcprobe_k8s_finalizer_removal_seconds histogram: from a second (the
// resolution of deletionTimestamp) to a day.
func DefaultRemovalBuckets() []float64 {
	return []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600}
}

// Option configures a Watcher. Options are validated by New: a bad value is
// an error naming the option, never a panic.
type Option func(*config) error

type config struct {
	gvks           []schema.GroupVersionKind
	stuckAfter     time.Duration
	checkInterval  time.Duration
	maxNames       int
	maxReports     int
	buckets        []float64
	logger         *slog.Logger
	tracerProvider trace.TracerProvider
	stuckFunc      func(StuckObject)
	clock          clock.WithTicker
	registerer     prometheus.Registerer
	leaderOnly     bool
}

func defaultConfig() config {
	return config{
		stuckAfter:    DefaultStuckAfter,
		checkInterval: DefaultCheckInterval,
		maxNames:      DefaultMaxFinalizerNames,
		maxReports:    DefaultMaxReportsPerCheck,
		buckets:       DefaultRemovalBuckets(),
		clock:         clock.RealClock{},
		registerer:    metrics.Registry,
		leaderOnly:    true,
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("k8sfinalizers: New: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	if len(c.gvks) == 0 {
		return errors.New("k8sfinalizers: no GroupVersionKind to watch: pass WithGVKs")
	}
	return nil
}

// WithGVKs adds kinds to watch (at least one is required), such as
// corev1.SchemeGroupVersion.WithKind("ConfigMap"). Each is watched through
// a metadata-only informer, so the kind needs no Go type in the scheme:
// custom resources work as they are. A kind given twice is watched once.
func WithGVKs(gvks ...schema.GroupVersionKind) Option {
	return func(c *config) error {
		for _, g := range gvks {
			if g.Version == "" || g.Kind == "" {
				return fmt.Errorf("k8sfinalizers: WithGVKs: %q needs a version and a kind", g.String())
			}
			if !slices.Contains(c.gvks, g) {
				c.gvks = append(c.gvks, g)
			}
		}
		return nil
	}
}

// WithStuckAfter sets how long an object may stay terminating with a
// finalizer before it is reported as stuck (default DefaultStuckAfter). It
// must be positive.
func WithStuckAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("k8sfinalizers: WithStuckAfter: must be positive, got %v", d)
		}
		c.stuckAfter = d
		return nil
	}
}

// WithCheckInterval sets how often Start looks for newly stuck objects
// (default DefaultCheckInterval). It must be at least a millisecond.
func WithCheckInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("k8sfinalizers: WithCheckInterval: must be at least 1ms, got %v", d)
		}
		c.checkInterval = d
		return nil
	}
}

// WithMaxFinalizerNames bounds how many distinct finalizer names of one
// GroupVersionKind get series of their own (default
// DefaultMaxFinalizerNames, at most 1024); names seen after that are
// counted under finalizer="other" (OtherFinalizer).
func WithMaxFinalizerNames(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("k8sfinalizers: WithMaxFinalizerNames: must be in [1, 1024], got %d", n)
		}
		c.maxNames = n
		return nil
	}
}

// WithMaxReportsPerCheck bounds how many stuck objects one check reports
// (default DefaultMaxReportsPerCheck); the others are reported by the next
// checks.
func WithMaxReportsPerCheck(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("k8sfinalizers: WithMaxReportsPerCheck: must be at least 1, got %d", n)
		}
		c.maxReports = n
		return nil
	}
}

// WithRemovalBuckets sets the upper bounds, in seconds, of the
// gcprobe_k8s_finalizer_removal_seconds histogram (default
// DefaultRemovalBuckets). They must be positive, finite and increasing.
func WithRemovalBuckets(bounds ...float64) Option {
	return func(c *config) error {
		if len(bounds) == 0 {
			return errors.New("k8sfinalizers: WithRemovalBuckets: no bounds")
		}
		for i, b := range bounds {
			if b <= 0 || math.IsInf(b, 0) || math.IsNaN(b) || (i > 0 && b <= bounds[i-1]) {
				return fmt.Errorf("k8sfinalizers: WithRemovalBuckets: bounds must be positive, finite and increasing, got %v", bounds)
			}
		}
		c.buckets = slices.Clone(bounds)
		return nil
	}
}

// WithLogger makes the watcher log each stuck object (at Warn, with its
// namespace and name) and the end of a reported object's wait (at Info)
// to l. The watcher is silent by default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("k8sfinalizers: WithLogger: nil Logger")
		}
		c.logger = l
		return nil
	}
}

// WithTracerProvider makes the watcher emit a span for each check that
// finds newly stuck objects, with an event per object (see the package
// documentation). Without it, the watcher emits no spans.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("k8sfinalizers: WithTracerProvider: nil TracerProvider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// WithStuckFunc makes the watcher call fn once for each object that becomes
// stuck, from the goroutine running Start, for example to record a
// Kubernetes Event. fn must not block for long: the next check waits for
// it.
func WithStuckFunc(fn func(StuckObject)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("k8sfinalizers: WithStuckFunc: nil func")
		}
		c.stuckFunc = fn
		return nil
	}
}

// WithClock replaces the real clock, for tests: k8s.io/utils/clock/testing's
// FakeClock drives ages, removal times and the stuck checks.
func WithClock(clk clock.WithTicker) Option {
	return func(c *config) error {
		if clk == nil {
			return errors.New("k8sfinalizers: WithClock: nil clock")
		}
		c.clock = clk
		return nil
	}
}

// WithRegisterer makes Start register the watcher's collector on r instead
// of controller-runtime's metrics.Registry (the registry the manager's
// metrics server serves).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("k8sfinalizers: WithRegisterer: nil Registerer")
		}
		c.registerer = r
		return nil
	}
}

// WithLeaderElection sets what NeedLeaderElection returns (default true):
// whether, in a manager with leader election, only the leader exports the
// series and reports stuck objects. Every replica watches the same
// cluster, so by default one reports and the others stay quiet (their
// informers still track, so a new leader reports at once). Pass false to
// have every replica export the series.
func WithLeaderElection(leaderOnly bool) Option {
	return func(c *config) error {
		c.leaderOnly = leaderOnly
		return nil
	}
}
