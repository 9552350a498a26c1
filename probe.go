package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/internal/listener"
	"github.com/gcprobe/probe/internal/page"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/gcprobe/probe/tracing"
)

// ErrAlreadyRegistered is wrapped by the error Start returns when the
// registerer already has a gcprobe collector, typically a second probe.
var ErrAlreadyRegistered = errors.New("probe: a gcprobe collector is already registered on this registerer")

// Errors wrapped by Start and (*Probe).Start; the same values as
// memstats.ErrRunning and tracing.ErrRunning (and ErrStopped), so errors.Is
// works with any of them.
var (
	// ErrRunning is wrapped by the error of (*Probe).Start on a probe
	// that already runs.
	ErrRunning = lifecycle.ErrRunning
	// ErrStopped is wrapped by the error of (*Probe).Start on a probe
	// that was stopped, or whose start failed: a probe runs once.
	ErrStopped = lifecycle.ErrStopped
)

// Probe wires the ledger, the sampler and the exporters together and owns
// their lifecycle. Create it with New (then Start it) or with the
// package-level Start.
//
// A probe runs once: idle after New, running after Start, stopped after
// Stop (or when the context of (*Probe).Start ends, or when starting it
// failed), for good. (*Probe).Start on a running probe returns an error
// wrapping ErrRunning, on a stopped one an error wrapping ErrStopped: make
// a new probe instead. Stop is idempotent, works in any state, and returns
// once everything the probe started has ended: its goroutines, and the
// requests its handlers were serving.
//
// A Probe must be made by New or Start. A nil or zero-value Probe{} has
// nothing to run: its Start and Stop return an error naming the method,
// its handlers answer 500 with that error, and Report and ReportNow log it
// through slog's default logger; none of them panics.
type Probe struct {
	cfg       config
	watcher   *finalizerwatch.Watcher
	sampler   *memstats.Sampler
	collector *collector
	profile   http.Handler // pprofexporter's, unguarded
	reporter  *tracing.Reporter
	heap      *heapprofile.Profiler
	operator  *operatorCauses // an operator's own GC causes (gccause_operator.go)
	forced    recentForced    // forced GC lines by their recent calls (gccause_operator.go)
	history   *page.History   // the live page's memory (internal/page)

	life lifecycle.Lifecycle // idle → running → stopped, once

	// Set by start and read by stop, both under life's lock; mu guards
	// what Addr reads.
	registered bool
	server     *http.Server
	restore    func() // undoes WithFullStacks and the suspect age on the watcher
	detach     func() // detaches the runtime build mode's hooks (logs.go)
	mu         sync.Mutex
	addr       net.Addr
	listener   *listener.Listener

	panics   atomic.Uint64
	panicLog sync.Once
}

// New returns a probe configured by opts, not yet running.
func New(opts ...Option) (*Probe, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	sampler, err := memstats.New(append([]memstats.Option{memstats.WithRunning(runningFunc(cfg.watcher))}, cfg.samplerOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := &Probe{
		cfg:     cfg,
		watcher: cfg.watcher,
		sampler: sampler,
		profile: pprofexporter.Handler(cfg.watcher),
		history: page.NewHistory(),
	}
	p.operator = newOperatorCauses()
	if p.heap, err = newHeapProfile(&cfg, p.operator); err != nil {
		return nil, err
	}
	inner, err := promexporter.New(append([]promexporter.Option{
		promexporter.WithWatcher(cfg.watcher),
		promexporter.WithSampler(sampler),
		promexporter.WithHeapProfile(p.heap.Snapshot),
		promexporter.WithCauses(p.causeLabels),
	}, cfg.promOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p.collector = newCollector(p, inner)
	trOpts := append([]tracing.Option{
		tracing.WithSampler(sampler),
		tracing.WithWatcher(cfg.watcher),
	}, cfg.traceOpts...)
	if p.reporter, err = tracing.New(trOpts...); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p.life.Name, p.life.RunName = "probe: Probe", "Start"
	return p, nil
}

// Start starts a probe with opts in the background and returns it; Stop
// ends it.
//
//	p, err := probe.Start()
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer p.Stop()
func Start(opts ...Option) (*Probe, error) {
	p, err := New(opts...)
	if err != nil {
		return nil, err
	}
	if err := p.life.Start(p.start, p.stop); err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs the probe until ctx ends or Stop is called, then stops it and
// returns Stop's error. It returns at once with an error if the probe
// cannot start: its collector is already registered (ErrAlreadyRegistered),
// its listener cannot bind, it runs already (ErrRunning) or it was stopped
// (ErrStopped); the probe is stopped after any of these but ErrRunning.
// On a nil or zero-value Probe (not made by New) it returns an error.
// With this signature a *Probe is a controller-runtime manager.Runnable:
// mgr.Add(p).
func (p *Probe) Start(ctx context.Context) error {
	if err := p.made("Start"); err != nil {
		return err
	}
	return p.life.Run(ctx, p.start, func(ctx context.Context) { <-ctx.Done() }, p.stop)
}

// NeedLeaderElection returns false: every replica of an operator has its
// own heap, and each must be watched, leader or not
// (controller-runtime's manager.LeaderElectionRunnable).
func (p *Probe) NeedLeaderElection() bool { return false }

// start registers the collector, starts the sampler, the span reporter, the
// ranking loop and the listener. If it fails, the lifecycle calls stop to
// undo what it did.
func (p *Probe) start() error {
	if err := p.cfg.registerer.Register(p.collector); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return fmt.Errorf("%w: %w", ErrAlreadyRegistered, err)
		}
		return fmt.Errorf("probe: registering the collector: %w", err)
	}
	p.registered = true
	if err := p.sampler.Start(); err != nil {
		return fmt.Errorf("probe: starting the sampler: %w", err)
	}
	if err := p.reporter.Start(); err != nil {
		return fmt.Errorf("probe: starting the span reporter: %w", err)
	}
	if p.cfg.listenAddr != "" {
		if err := p.listen(); err != nil {
			return err
		}
	}
	if len(p.cfg.lookThrough) > 0 {
		if err := stackcapture.SetLookThrough(p.cfg.lookThrough...); err != nil { // validated by WithLookThrough
			return fmt.Errorf("probe: %w", err)
		}
	}
	var undo []func()
	if p.cfg.fullStacks && !p.watcher.FullStacks() {
		p.watcher.SetFullStacks(true)
		undo = append(undo, func() { p.watcher.SetFullStacks(false) })
	}
	if prev := p.watcher.SuspectAge(); p.cfg.ageSet || prev == 0 {
		if p.watcher.SetSuspectAge(p.cfg.suspectAge) == nil && prev != p.cfg.suspectAge { // validated by WithSuspectAge
			undo = append(undo, func() { p.watcher.SetSuspectAge(prev) })
		}
	}
	if len(undo) > 0 {
		p.restore = func() {
			for _, f := range undo {
				f()
			}
		}
	}
	// Rank the ledger when each GC cycle ends, so that scrapes and
	// reports read the cycle's ranking rather than the first of them
	// making it.
	p.goSafe("ranking", func() { p.watcher.RankEachCycle(p.life.Done()) })
	p.attachRuntime()
	p.startHeapProfile()
	p.startCycleLoop() // cycles.go: the growing-site log and the page's history
	p.startEventLog()  // last: nothing after it can fail and leave it running
	return nil
}

// Stop stops the sampler, the span reporter and the listener, unregisters
// the collector, and returns once every goroutine the probe started has
// ended and every request its handlers (Handler, ProfileHandler) were
// serving has been answered; requests waiting for their turn are answered
// 503 at once. It is idempotent, and safe to call concurrently and in any
// state: every call returns the first call's result once it is done. A
// stopped probe cannot be started again. The ledger keeps counting: it
// belongs to the watcher, and registrations go on. On a nil or zero-value
// Probe (not made by New or Start) it returns an error.
func (p *Probe) Stop() error {
	if err := p.made("Stop"); err != nil {
		return err
	}
	return p.life.Stop(p.stop)
}

// stop undoes start, also a start that failed half-way. The lifecycle has
// already closed Done (so queued requests give up) and waits, after stop,
// for the goroutines and requests it counted.
func (p *Probe) stop() error {
	var errs []error
	if p.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		if err := p.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("probe: stopping the listener: %w", err))
			p.server.Close()
		}
		cancel()
	}
	p.reporter.Stop()
	p.sampler.Stop()
	if p.registered {
		p.cfg.registerer.Unregister(p.collector)
	}
	if p.restore != nil {
		p.restore()
	}
	if p.detach != nil {
		p.detach()
	}
	return errors.Join(errs...)
}

// ProfileHandler serves the outstanding finalizers and cleanups as a pprof
// profile: mount it at /debug/pprof/finalizers, for example as an extra
// handler of controller-runtime's metrics server. It serves before Start
// and while the probe runs, building at most
// pprofexporter.MaxConcurrentBuilds profiles at once (503 beyond). Stop
// waits for the builds in progress; from then on the handler answers 503
// Service Unavailable: a stopped probe runs no code. With ?seconds=N it
// serves the delta over the next N seconds (see pprofexporter.Handler); a
// delta waiting when Stop is called ends at once (503), so that Stop does
// not wait for it. The handler of a nil or zero-value Probe answers 500
// with an error naming the problem.
func (p *Probe) ProfileHandler() http.Handler {
	if err := p.made("ProfileHandler"); err != nil {
		return unmadeHandler(err)
	}
	return p.guard(p.untilStop(p.profile))
}

// Collector returns the probe's Prometheus collector, for callers that
// gather it themselves.
func (p *Probe) Collector() prometheus.Collector { return p.collector }

// ReportNow emits a gcprobe.leak_report span now, besides the periodic
// ones.
func (p *Probe) ReportNow(ctx context.Context) {
	if err := p.made("ReportNow"); err != nil {
		logUnmade(err)
		return
	}
	p.reporter.ReportNow(ctx)
}

// Sampler returns the probe's memstats sampler, for subscribing to detector
// events or reading pause history.
func (p *Probe) Sampler() *memstats.Sampler { return p.sampler }

// Watcher returns the ledger the probe reports.
func (p *Probe) Watcher() *finalizerwatch.Watcher { return p.watcher }

// Addr returns the address the probe's own listener is bound to, or nil if
// it has none (see WithListenAddr).
func (p *Probe) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// goSafe runs fn in a goroutine that Stop waits for. A panic in it is
// recovered, counted and logged once: the probe must never take its host
// down. Once Stop has begun, fn does not run.
func (p *Probe) goSafe(name string, fn func()) {
	p.life.Go(func() {
		defer p.recoverPanic(name)
		fn()
	})
}

// guard makes Stop wait for the requests h is serving, and answers 503 to
// those that come once Stop has begun.
func (p *Probe) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.life.Enter() {
			http.Error(w, "gcprobe: the probe is stopped", http.StatusServiceUnavailable)
			return
		}
		defer p.life.Exit()
		h.ServeHTTP(w, r)
	})
}

func (p *Probe) recoverPanic(where string) {
	if r := recover(); r != nil {
		p.panics.Add(1)
		p.panicLog.Do(func() {
			p.cfg.logger.Error("gcprobe: recovered from a panic inside the probe; it keeps running", "where", where, "panic", fmt.Sprint(r))
		})
	}
}

// made returns an error naming the method fn if p was not made by New or
// Start (a nil or zero-value Probe, which has nothing to run): the probe
// must answer with an error rather than panic into its host.
func (p *Probe) made(fn string) error {
	if p == nil || p.watcher == nil {
		return fmt.Errorf("probe: (*Probe).%s on a nil or zero-value Probe: make one with probe.New or probe.Start", fn)
	}
	return nil
}

// logUnmade reports err, from a method that has no error to return,
// through slog's default logger: a zero-value Probe has no logger of its
// own.
func logUnmade(err error) { slog.Default().Error("gcprobe: " + err.Error()) }

// unmadeHandler answers every request 500 with err: what the handlers of
// a zero-value Probe serve.
func unmadeHandler(err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gcprobe: "+err.Error(), http.StatusInternalServerError)
	})
}

// Panics returns how many panics inside the probe's own goroutines were
// recovered.
func (p *Probe) Panics() uint64 { return p.panics.Load() }

// runningFunc is the finalizer_blocked detector's source: the watcher's
// longest-running callback. memstats may not import finalizerwatch (imports
// point down only), so the probe, which imports both, joins them here.
func runningFunc(w *finalizerwatch.Watcher) memstats.RunningFunc {
	var (
		mu sync.Mutex
		sn finalizerwatch.Snapshot // reused: no allocation per tick
	)
	return func() (memstats.Running, bool) {
		mu.Lock()
		defer mu.Unlock()
		// No top sites, and no ranking unless there is none yet: the
		// running callbacks are read live, in O(1).
		w.Read(&sn, finalizerwatch.ReadOptions{Unranked: true})
		if len(sn.Running) == 0 {
			return memstats.Running{}, false
		}
		r := sn.Running[0]
		return memstats.Running{Kind: r.Kind.String(), Site: r.Site.Label(), For: r.For}, true
	}
}
