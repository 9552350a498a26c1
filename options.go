package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/gcprobe/probe/tracing"
)

// Defaults for the probe's options. Each is the default of the package that
// owns the setting.
const (
	// DefaultInterval is how often the probe samples the runtime when no
	// GC cycle wakes it sooner.
	DefaultInterval = memstats.DefaultInterval
	// DefaultTopK is how many sites (of either kind) get series and report
	// entries of their own: finalizerwatch.DefaultTopK, the one default of
	// a reader's top K (promexporter's and tracing's too).
	DefaultTopK = finalizerwatch.DefaultTopK
	// DefaultSuspectAge is the probe's suspect age (WithSuspectAge): on a
	// long-running server, a registration is a leak suspect once it has
	// survived three GC cycles and 30 s, and a site is growing once its
	// suspects have kept rising for 30 s. A pool that warms up, files
	// opened at start-up and kept, a cache filled once are never taken for
	// a leak; one object leaked every two seconds is, in about a minute.
	DefaultSuspectAge = 30 * time.Second
	// DefaultMinReadMemStatsInterval is the least time between two
	// runtime.ReadMemStats calls when WithReadMemStats is on.
	DefaultMinReadMemStatsInterval = memstats.DefaultMinReadMemStatsInterval
)

// Option configures a Probe. Options are validated by New and Start; a bad
// value, or a nil Option, is an error naming it, never a panic.
//
// An option that sets something a part of the probe owns (the sampling
// interval, top K, the span thresholds) forwards to that package's option:
// the limit is the package's, defined once, and New returns that package's
// error, prefixed with "probe: ".
type Option func(*config) error

type config struct {
	registerer  prometheus.Registerer
	watcher     *finalizerwatch.Watcher
	topK        int // the probe's own reads' K; validated by promexporter.WithTopK (finalizerwatch.CheckTopK)
	listenAddr  string
	listenWide  bool // listenAddr came from WithUnauthenticatedListenAddr
	ownMetrics  bool // WithOwnMetrics: Handler's /metrics shows the probe's series alone
	fullStacks  bool
	suspectAge  time.Duration
	ageSet      bool // WithSuspectAge was given
	lookThrough []string
	logger      *slog.Logger
	loggerSet   bool // WithLogger was given: detector events go there
	samplerOpts []memstats.Option
	promOpts    []promexporter.Option
	traceOpts   []tracing.Option
	heapOpts    []heapprofile.Option // WithHeapProfileOptions
}

func defaultConfig() config {
	return config{
		registerer: prometheus.DefaultRegisterer,
		watcher:    finalizerwatch.Default,
		topK:       DefaultTopK,
		suspectAge: DefaultSuspectAge,
		logger:     slog.New(slog.DiscardHandler),
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("probe: New: nil Option")
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
// It forwards tracing.WithTracerProvider (tp must not be nil).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return tracingOptions(tracing.WithTracerProvider(tp))
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
// the probe sooner (default DefaultInterval). It forwards
// memstats.WithInterval, whose limit applies (d must be positive).
func WithInterval(d time.Duration) Option {
	return WithSamplerOptions(memstats.WithInterval(d))
}

// WithTopK sets how many sites get Prometheus series, leak report events,
// Report entries and live-page rows of their own (default DefaultTopK): the
// K sites of either kind most likely to leak (finalizerwatch's
// ReadOptions.TopK); the rest are summed under site="other", one per kind. It forwards promexporter.WithTopK and
// tracing.WithTopK, whose limit, finalizerwatch.CheckTopK, applies (k must
// be at least 1). Each of them shows the top sites a Read of K returns, as
// Read cut them. The number
// of series stays bounded whatever k is: there are no more sites than the
// watcher keeps (finalizerwatch.WithMaxSites). The heap profile's lists of
// allocating and growing sites are another ranking, with a K of their own
// (heapprofile.WithTopK, through WithHeapProfileOptions); the Prometheus
// exporter shows at most K of each.
func WithTopK(k int) Option {
	return func(c *config) error {
		c.topK = k
		c.promOpts = append(c.promOpts, promexporter.WithTopK(k))
		c.traceOpts = append(c.traceOpts, tracing.WithTopK(k))
		return nil
	}
}

// WithListenAddr makes the probe serve /metrics and
// /debug/pprof/finalizers itself on addr, a loopback address (such as
// "127.0.0.1:9090", "[::1]:9090" or "localhost:9090"), for programs that
// have no metrics server. The listener is unauthenticated, so any other
// address is an error, including ":9090" and "0.0.0.0:9090" (every
// interface); WithUnauthenticatedListenAddr exposes it wider on purpose.
// The listener bounds what clients can hold: at most MaxListenerConns
// connections open at once (when all are taken, a new one takes the place
// of one without a request in progress: silent, idle or slow to send its
// header), a request header within ListenerReadHeaderTimeout, idle
// keep-alive connections closed after ListenerIdleTimeout, timeouts on
// every phase of a request, and the limits on concurrent scrapes of
// Handler.
func WithListenAddr(addr string) Option {
	return func(c *config) error {
		if err := checkListenAddr(addr, false); err != nil {
			return fmt.Errorf("probe: WithListenAddr: %w", err)
		}
		c.listenAddr, c.listenWide = addr, false
		return nil
	}
}

// WithUnauthenticatedListenAddr is WithListenAddr for an address that is
// not loopback, such as ":9090" (every interface) or "10.0.0.5:9090":
// anyone who can reach it reads the probe's metrics and profiles (the
// names of your functions and files, your heap's size) without
// authentication. Prefer loopback, or mount Handler behind your own
// authentication. When the probe starts, it logs a warning naming the
// address (to the WithLogger logger, else slog.Default()). The last of
// WithListenAddr and WithUnauthenticatedListenAddr given applies.
func WithUnauthenticatedListenAddr(addr string) Option {
	return func(c *config) error {
		if err := checkListenAddr(addr, true); err != nil {
			return fmt.Errorf("probe: WithUnauthenticatedListenAddr: %w", err)
		}
		c.listenAddr, c.listenWide = addr, true
		return nil
	}
}

// WithOwnMetrics makes /metrics, as WithListenAddr and Handler serve it,
// show the probe's own series (gcprobe_*) alone. Without it /metrics
// serves the whole registry the probe registered on, when that registerer
// is also a prometheus.Gatherer: with the default,
// prometheus.DefaultRegisterer, that is everything the program and its
// libraries registered there too (go_*, process_*, their own), which suits
// a program that has no metrics server of its own and wants one. The
// probe's collector is registered on the WithRegisterer registerer either
// way.
func WithOwnMetrics() Option {
	return func(c *config) error {
		c.ownMetrics = true
		return nil
	}
}

// checkListenAddr checks that addr is host:port and, unless wide, that
// host is loopback: an IP literal that is, or the name "localhost". Other
// names are refused: what they resolve to may change. The listener checks
// again the address it is bound to (a hosts file may map "localhost"
// elsewhere).
func checkListenAddr(addr string, wide bool) error {
	if addr == "" {
		return errors.New("empty address")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if wide || isLoopbackHost(host) {
		return nil
	}
	what := fmt.Sprintf("host %q is not a loopback address", host)
	if host == "" {
		what = "it listens on every interface"
	} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		what = fmt.Sprintf("%s listens on every interface", host)
	}
	return fmt.Errorf("%q: %s, and the listener is unauthenticated; bind it to loopback (such as 127.0.0.1) or, to expose it on purpose, use WithUnauthenticatedListenAddr", addr, what)
}

// isLoopbackHost reports whether host (from net.SplitHostPort) names only
// loopback addresses.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// WithReadMemStats turns on runtime.ReadMemStats, at most once per
// DefaultMinReadMemStatsInterval. It stops the world on every call; the
// probe does not call it unless asked. It forwards memstats.WithReadMemStats.
func WithReadMemStats(on bool) Option {
	return WithSamplerOptions(memstats.WithReadMemStats(on))
}

// WithFullStacks makes the watcher capture the full stack of every
// registration (see finalizerwatch.WithFullStacks) while the probe runs.
func WithFullStacks(on bool) Option {
	return func(c *config) error {
		c.fullStacks = on
		return nil
	}
}

// WithSuspectAge sets how long an outstanding registration must also have
// been outstanding, besides its GC cycles, to be a leak suspect, and how
// long a site's suspects must keep reaching new highs for it to be
// classed growing (finalizerwatch.WithSuspectAge; default
// DefaultSuspectAge, 0 for GC cycles alone). Without it the probe sets
// DefaultSuspectAge on the watcher it reports, unless that watcher has an
// age of its own; with it, d. Stop restores the watcher's age.
func WithSuspectAge(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > finalizerwatch.MaxSuspectAge {
			return fmt.Errorf("probe: WithSuspectAge: must be in [0, %v], got %v", finalizerwatch.MaxSuspectAge, d)
		}
		c.suspectAge, c.ageSet = d, true
		return nil
	}
}

// WithLookThrough names helpers that forward registrations to their
// callers, by full function name ("example.com/fs.OsFS.Open") or by
// package path ("example.com/fs": each of its functions): a registration
// made in one of them (or in the standard library on its behalf) is
// counted at its caller's line, with the helper kept in the stack
// (stackcapture.SetLookThrough, process-wide, set when the probe starts).
// In the runtime build mode the ledger finds the helpers through which the
// standard library opens files and connections itself (a one-line
// forwarder, or one it has seen called from two lines); the option names
// those it cannot, such as a helper that sets a finalizer on its own type
// or one the compiler inlined into each caller, from the first
// registration on.
func WithLookThrough(names ...string) Option {
	return func(c *config) error {
		if err := stackcapture.CheckLookThrough(names...); err != nil {
			return fmt.Errorf("probe: WithLookThrough: %w", err)
		}
		c.lookThrough = append(c.lookThrough, names...)
		return nil
	}
}

// WithLogger makes the probe log to l: detector events firing and
// clearing (at Warn, always) and what goes wrong inside the probe. Without
// it detector events go to slog.Default() and internal errors are
// discarded; pass slog.New(slog.DiscardHandler) to silence both. With
// controller-runtime, pass its logger: slog.New(logr.ToSlogHandler(log)).
// With zap, bridge it: slog.New(zapslog.NewHandler(logger.Core()))
// (go.uber.org/zap/exp/zapslog). Both keep Warn as Warn. Without WithLogger
// in a program that sends the log package into zap (zap.RedirectStdLog),
// slog.Default()'s lines arrive at zap's Info with "WARN" in the message.
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
// as detector thresholds, after the probe's own; they are validated by
// memstats.New.
func WithSamplerOptions(opts ...memstats.Option) Option {
	return func(c *config) error {
		c.samplerOpts = append(c.samplerOpts, opts...)
		return nil
	}
}

// tracingOptions forwards opts to the probe's tracing.Reporter, after the
// probe's own (its watcher and sampler); tracing.New validates them.
func tracingOptions(opts ...tracing.Option) Option {
	return func(c *config) error {
		c.traceOpts = append(c.traceOpts, opts...)
		return nil
	}
}

// WithLeakReportInterval sets how often the probe emits a
// gcprobe.leak_report span (default tracing.DefaultLeakReportInterval). It
// forwards tracing.WithLeakReportInterval, whose limit applies (d must be
// positive).
func WithLeakReportInterval(d time.Duration) Option {
	return tracingOptions(tracing.WithLeakReportInterval(d))
}

// WithPauseThreshold sets the shortest GC pause for which the probe emits a
// gcprobe.gc_pause span (default tracing.DefaultPauseThreshold; zero: every
// pause). It forwards tracing.WithPauseThreshold, whose limit applies (d
// must not be negative).
func WithPauseThreshold(d time.Duration) Option {
	return tracingOptions(tracing.WithPauseThreshold(d))
}
