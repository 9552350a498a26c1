package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/tracing"
)

// ErrAlreadyRegistered is wrapped by the error Start returns when the
// registerer already has a gcprobe collector, typically a second probe.
var ErrAlreadyRegistered = errors.New("probe: a gcprobe collector is already registered on this registerer")

// Probe wires the ledger, the sampler and the exporters together and owns
// their lifecycle. Create it with New (then Start it) or with the
// package-level Start.
type Probe struct {
	cfg       config
	watcher   *finalizerwatch.Watcher
	sampler   *memstats.Sampler
	collector *collector
	profile   http.Handler
	reporter  *tracing.Reporter

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopErr  error
	done     chan struct{} // closed by Stop
	wg       sync.WaitGroup
	server   *http.Server
	addr     net.Addr
	restore  func() // undoes WithFullStacks on the watcher
	panics   atomic.Uint64
	panicLog sync.Once
}

// New returns a probe configured by opts, not yet running.
func New(opts ...Option) (*Probe, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	smOpts := append([]memstats.Option{
		memstats.WithInterval(cfg.interval),
		memstats.WithReadMemStats(cfg.readMemStats),
		memstats.WithRunning(runningFunc(cfg.watcher)),
	}, cfg.samplerOpts...)
	sampler, err := memstats.New(smOpts...)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := &Probe{
		cfg:     cfg,
		watcher: cfg.watcher,
		sampler: sampler,
		profile: pprofexporter.Handler(cfg.watcher),
		done:    make(chan struct{}),
	}
	inner, err := promexporter.New(
		promexporter.WithWatcher(cfg.watcher),
		promexporter.WithSampler(sampler),
		promexporter.WithTopK(cfg.topK),
	)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p.collector = newCollector(p, inner)
	trOpts := []tracing.Option{
		tracing.WithSampler(sampler),
		tracing.WithWatcher(cfg.watcher),
		tracing.WithTopK(cfg.topK),
		tracing.WithLeakReportInterval(cfg.leakInterval),
		tracing.WithPauseThreshold(cfg.pauseThreshold),
	}
	if cfg.tracerProvider != nil {
		trOpts = append(trOpts, tracing.WithTracerProvider(cfg.tracerProvider))
	}
	if p.reporter, err = tracing.New(trOpts...); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
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
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs the probe until ctx ends or Stop is called, then stops it and
// returns Stop's error. It returns at once with an error if the probe
// cannot start (its collector is already registered, its listener cannot
// bind, or it was started before). With this signature a *Probe is a
// controller-runtime manager.Runnable: mgr.Add(p).
func (p *Probe) Start(ctx context.Context) error {
	if err := p.start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-p.done:
	}
	return p.Stop()
}

// NeedLeaderElection returns false: every replica of an operator has its
// own heap, and each must be watched, leader or not
// (controller-runtime's manager.LeaderElectionRunnable).
func (p *Probe) NeedLeaderElection() bool { return false }

// start registers the collector, starts the sampler and the listener.
func (p *Probe) start() (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("probe: Start: already started")
	}
	p.started = true
	if err := p.cfg.registerer.Register(p.collector); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return fmt.Errorf("%w: %w", ErrAlreadyRegistered, err)
		}
		return fmt.Errorf("probe: registering the collector: %w", err)
	}
	defer func() {
		if err != nil {
			p.cfg.registerer.Unregister(p.collector)
			p.reporter.Stop()
			p.sampler.Stop()
		}
	}()
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
	if p.cfg.fullStacks && !p.watcher.FullStacks() {
		p.watcher.SetFullStacks(true)
		p.restore = func() { p.watcher.SetFullStacks(false) }
	}
	p.startEventLog() // last: nothing after it can fail and leave it running
	return nil
}

// Stop stops the sampler and the listener, unregisters the collector, and
// waits for every goroutine the probe started. It is idempotent: later
// calls return the first call's result. The ledger keeps counting: it
// belongs to the watcher, and registrations go on.
func (p *Probe) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return p.stopErr
	}
	p.stopped = true
	close(p.done)
	if !p.started {
		return nil
	}
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
	p.cfg.registerer.Unregister(p.collector)
	if p.restore != nil {
		p.restore()
	}
	p.wg.Wait()
	p.stopErr = errors.Join(errs...)
	return p.stopErr
}

// ProfileHandler serves the outstanding finalizers and cleanups as a pprof
// profile: mount it at /debug/pprof/finalizers, for example as an extra
// handler of controller-runtime's metrics server. It works whether or not
// the probe runs.
func (p *Probe) ProfileHandler() http.Handler { return p.profile }

// Collector returns the probe's Prometheus collector, for callers that
// gather it themselves.
func (p *Probe) Collector() prometheus.Collector { return p.collector }

// ReportNow emits a gcprobe.leak_report span now, besides the periodic
// ones.
func (p *Probe) ReportNow(ctx context.Context) { p.reporter.ReportNow(ctx) }

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
// down.
func (p *Probe) goSafe(name string, fn func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.recoverPanic(name)
		fn()
	}()
}

func (p *Probe) recoverPanic(where string) {
	if r := recover(); r != nil {
		p.panics.Add(1)
		p.panicLog.Do(func() {
			p.cfg.logger.Error("gcprobe: recovered from a panic inside the probe; it keeps running", "where", where, "panic", fmt.Sprint(r))
		})
	}
}

// Panics returns how many panics inside the probe's own goroutines were
// recovered.
func (p *Probe) Panics() uint64 { return p.panics.Load() }
