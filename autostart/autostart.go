// Package autostart starts a probe when the program starts, configured by
// GCPROBE_* environment variables, for a program whose source you do not
// change. finalizercheck -runtime -start adds its import to every main
// package of a module through the build's overlay; you may also import it
// yourself:
//
//	import _ "github.com/gcprobe/probe/autostart"
//
// Without GCPROBE_LISTEN in the environment the import does nothing: no
// goroutine, no listener, no registry touched; the program runs as if
// gcprobe were not linked in. With it, the package's init starts a probe
// (probe.Start) that serves /metrics, the profiles and the live page on
// that address with WithListenAddr's rules, and logs to standard error.
// What goes wrong is logged, never panicked or exited on: a bad variable
// is an error line naming it, and the probe does not start.
//
// # Variables
//
//   - GCPROBE_LISTEN: the address to serve on, a loopback host:port such as
//     127.0.0.1:9464 (probe.WithListenAddr), or "none" to start the probe
//     with its logs alone. Unset or empty: nothing starts.
//   - GCPROBE_UNAUTHENTICATED: "true" allows a GCPROBE_LISTEN that is not
//     loopback, such as :9464 (probe.WithUnauthenticatedListenAddr): anyone
//     who reaches it reads the metrics and profiles.
//   - GCPROBE_TOPK: how many sites get series and report entries of their
//     own (probe.WithTopK; default probe.DefaultTopK).
//   - GCPROBE_INTERVAL: how often the runtime is sampled when no GC cycle
//     wakes the probe sooner, a Go duration such as 5s (probe.WithInterval).
//   - GCPROBE_SUSPECT_AGE: how long an outstanding registration must live
//     to be a leak suspect, a Go duration (probe.WithSuspectAge).
//   - GCPROBE_READ_MEMSTATS: "true" turns on runtime.ReadMemStats, which
//     stops the world (probe.WithReadMemStats).
//   - GCPROBE_METRICS: "own" (the default) registers the probe's collector
//     on a registry of its own, which /metrics serves: the gcprobe_* series
//     alone, and the program's default registry untouched. "default"
//     registers it on prometheus.DefaultRegisterer, so that a /metrics the
//     program serves shows gcprobe's series too, and the probe's /metrics
//     shows everything that registry holds.
//   - GCPROBE_LOG_LEVEL: debug, info (the default), warn, error or off.
//     Detector events and likely leaks are logged at warn, what goes wrong
//     inside the probe at error, its start at info.
//   - GCPROBE_LOG_FORMAT: json (the default), one object per line with
//     "level", or text (slog's key=value form). Both go to standard error
//     through a handler of the probe's own, not through the log package, so
//     that a program which sends the log package elsewhere (into zap, say)
//     keeps the level of gcprobe's lines.
//
// Booleans take what strconv.ParseBool takes.
package autostart

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	probe "github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
)

// The variables that configure the probe.
const (
	EnvListen          = "GCPROBE_LISTEN"
	EnvUnauthenticated = "GCPROBE_UNAUTHENTICATED"
	EnvTopK            = "GCPROBE_TOPK"
	EnvInterval        = "GCPROBE_INTERVAL"
	EnvSuspectAge      = "GCPROBE_SUSPECT_AGE"
	EnvReadMemStats    = "GCPROBE_READ_MEMSTATS"
	EnvMetrics         = "GCPROBE_METRICS"
	EnvLogLevel        = "GCPROBE_LOG_LEVEL"
	EnvLogFormat       = "GCPROBE_LOG_FORMAT"
)

// ListenNone, as GCPROBE_LISTEN, starts the probe without a listener.
const ListenNone = "none"

var started atomic.Pointer[probe.Probe]

// Probe returns the probe this package started, or nil if none was (no
// GCPROBE_LISTEN, or a configuration that was refused).
func Probe() *probe.Probe { return started.Load() }

func init() {
	if os.Getenv(EnvListen) == "" {
		return
	}
	p, err := start(os.Getenv, os.Stderr)
	if p != nil {
		started.Store(p)
	}
	_ = err // logged by start
}

// start reads the configuration from getenv, starts a probe (with extra
// options after the variables', for tests) and logs to stderr; an error
// is logged there too (with the probe not started), and returned for
// tests.
func start(getenv func(string) string, stderr io.Writer, extra ...probe.Option) (*probe.Probe, error) {
	c, err := parse(getenv)
	if c.logger == nil {
		c.logger = slog.New(slog.NewJSONHandler(stderr, nil))
	}
	if err != nil {
		c.logger.Error("gcprobe: the probe is not started: " + err.Error())
		return nil, err
	}
	if c.handler != nil {
		c.logger = slog.New(c.handler(stderr))
	}
	opts := []probe.Option{probe.WithLogger(c.logger)}
	for _, o := range c.opts {
		opts = append(opts, o.opt)
	}
	p, err := probe.Start(append(opts, extra...)...)
	if err != nil {
		// Name the variable whose option refused, when one did alone.
		for _, o := range c.opts {
			if _, oerr := probe.New(o.opt); oerr != nil {
				err = fmt.Errorf("%s=%q: %w", o.name, getenv(o.name), oerr)
				break
			}
		}
		c.logger.Error("gcprobe: the probe is not started: " + err.Error())
		return nil, err
	}
	attrs := []any{"runtime_mode", finalizerwatch.RuntimeMode()}
	if a := p.Addr(); a != nil {
		attrs = append(attrs, "addr", a.String(), "page", "http://"+a.String()+probe.PagePath)
	}
	c.logger.Info("gcprobe: started from "+EnvListen, attrs...)
	return p, nil
}

// config is what the variables say.
type config struct {
	opts    []namedOption
	handler func(io.Writer) slog.Handler // nil: logging off
	logger  *slog.Logger                 // set when logging is off
}

// namedOption is an option and the variable that asked for it.
type namedOption struct {
	name string
	opt  probe.Option
}

// parse reads the variables. The error names the variable and its value.
func parse(getenv func(string) string) (config, error) {
	var c config
	level, format := new(slog.LevelVar), "json"
	switch v := strings.ToLower(strings.TrimSpace(getenv(EnvLogLevel))); v {
	case "", "info":
	case "debug":
		level.Set(slog.LevelDebug)
	case "warn", "warning":
		level.Set(slog.LevelWarn)
	case "error":
		level.Set(slog.LevelError)
	case "off", "none":
		c.logger = slog.New(slog.DiscardHandler)
	default:
		return c, badValue(EnvLogLevel, v, "debug, info, warn, error or off")
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv(EnvLogFormat))); v {
	case "", "json":
	case "text":
		format = "text"
	default:
		return c, badValue(EnvLogFormat, v, "json or text")
	}
	if c.logger == nil {
		ho := &slog.HandlerOptions{Level: level}
		c.handler = func(w io.Writer) slog.Handler {
			if format == "text" {
				return slog.NewTextHandler(w, ho)
			}
			return slog.NewJSONHandler(w, ho)
		}
	}

	wide, err := boolVar(getenv, EnvUnauthenticated)
	if err != nil {
		return c, err
	}
	switch addr := strings.TrimSpace(getenv(EnvListen)); {
	case strings.EqualFold(addr, ListenNone):
	case wide:
		c.opts = append(c.opts, namedOption{EnvListen, probe.WithUnauthenticatedListenAddr(addr)})
	default:
		c.opts = append(c.opts, namedOption{EnvListen, probe.WithListenAddr(addr)})
	}
	if v := strings.TrimSpace(getenv(EnvTopK)); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil {
			return c, badValue(EnvTopK, v, "a whole number")
		}
		c.opts = append(c.opts, namedOption{EnvTopK, probe.WithTopK(k)})
	}
	for _, d := range []struct {
		name string
		opt  func(time.Duration) probe.Option
	}{{EnvInterval, probe.WithInterval}, {EnvSuspectAge, probe.WithSuspectAge}} {
		v := strings.TrimSpace(getenv(d.name))
		if v == "" {
			continue
		}
		t, err := time.ParseDuration(v)
		if err != nil {
			return c, badValue(d.name, v, "a Go duration such as 5s")
		}
		c.opts = append(c.opts, namedOption{d.name, d.opt(t)})
	}
	ms, err := boolVar(getenv, EnvReadMemStats)
	if err != nil {
		return c, err
	}
	if ms {
		c.opts = append(c.opts, namedOption{EnvReadMemStats, probe.WithReadMemStats(true)})
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv(EnvMetrics))); v {
	case "", "own":
		c.opts = append(c.opts, namedOption{EnvMetrics, probe.WithRegisterer(prometheus.NewRegistry())})
	case "default":
	default:
		return c, badValue(EnvMetrics, v, "own or default")
	}
	// The options check their own values (the top K's range, a loopback
	// address): probe.Start names the option that refused.
	return c, nil
}

func boolVar(getenv func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badValue(name, v, "true or false")
	}
	return b, nil
}

func badValue(name, v, want string) error {
	return fmt.Errorf("%s=%q: want %s", name, v, want)
}
