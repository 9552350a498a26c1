package tracing

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/memstats"
)

// Errors returned by Start and Run.
var (
	// ErrRunning is returned by Start or Run while the reporter already
	// runs.
	ErrRunning = errors.New("tracing: reporter already running")
	// ErrStopped is returned by Start or Run after Stop.
	ErrStopped = errors.New("tracing: reporter stopped")
)

// ScopeName is the instrumentation scope of the reporter's tracer.
const ScopeName = "github.com/gcprobe/probe/tracing"

// Lifecycle states.
const (
	stateIdle = iota
	stateRunning
	stateStopped
)

// Reporter turns the finalizer ledger and the GC sampler into spans: a
// periodic leak report, a span per long GC pause, and a span per batch of
// detector events. Create it with New; see the package documentation.
type Reporter struct {
	cfg    config
	tracer trace.Tracer

	pauses pauseState
	dets   detectorQueue

	lifeMu sync.Mutex
	state  int
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Reporter configured by opts. It emits nothing until Start,
// Run, ReportNow or ReportPauses.
func New(opts ...Option) (*Reporter, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	r := &Reporter{
		cfg:    cfg,
		tracer: cfg.provider.Tracer(ScopeName),
	}
	r.pauses.init()
	r.dets.init(DefaultDetectorQueue)
	return r, nil
}

// Start runs the reporter in a background goroutine until Stop. It returns
// ErrRunning if the reporter already runs and ErrStopped after Stop.
func (r *Reporter) Start() error {
	ctx, done, err := r.begin(context.Background())
	if err != nil {
		return err
	}
	go r.loop(ctx, done)
	return nil
}

// Run runs the reporter until ctx is done or Stop is called, then returns
// nil: the shape of a controller-runtime manager.RunnableFunc. It returns
// ErrRunning if the reporter already runs and ErrStopped after Stop.
func (r *Reporter) Run(ctx context.Context) error {
	ctx, done, err := r.begin(ctx)
	if err != nil {
		return err
	}
	r.loop(ctx, done)
	return nil
}

// Stop stops the reporter and waits for its goroutine to end; the pauses
// and detector events seen by then are reported first. Stop is idempotent
// and safe to call concurrently; a stopped reporter cannot be started
// again, but ReportNow and ReportPauses keep working.
func (r *Reporter) Stop() {
	r.lifeMu.Lock()
	r.state = stateStopped
	cancel, done := r.cancel, r.done
	r.lifeMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (r *Reporter) begin(parent context.Context) (context.Context, chan struct{}, error) {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	switch r.state {
	case stateRunning:
		return nil, nil, ErrRunning
	case stateStopped:
		return nil, nil, ErrStopped
	}
	ctx, cancel := context.WithCancel(parent)
	r.state = stateRunning
	r.cancel = cancel
	r.done = make(chan struct{})
	return ctx, r.done, nil
}

// loop is the reporter's goroutine. Everything that creates spans on a
// schedule runs here, never on the sampler's goroutine: a tracer provider
// with a synchronous exporter may block, and the sampler must not.
func (r *Reporter) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var unsubscribe func()
	if s := r.cfg.sampler; s != nil {
		unsubscribe = s.Subscribe(r.dets.push)
	}
	leak := time.NewTicker(r.cfg.leakInterval)
	defer leak.Stop()
	var pauseC <-chan time.Time
	if r.cfg.pauses != nil {
		t := time.NewTicker(r.cfg.pauseInterval)
		defer t.Stop()
		pauseC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			if unsubscribe != nil {
				unsubscribe()
			}
			// Report what has been seen, with a context that is not
			// done: the spans' parent context is only a carrier here.
			flush := context.WithoutCancel(ctx)
			r.ReportPauses(flush)
			r.reportDetectors(flush)
			return
		case <-leak.C:
			r.ReportNow(ctx)
		case <-pauseC:
			r.ReportPauses(ctx)
		case <-r.dets.wake:
			r.reportDetectors(ctx)
		}
	}
}

// snapshot copies the sampler's latest round into dst; false without a
// sampler or before its first round.
func (r *Reporter) snapshot(dst *memstats.Snapshot) bool {
	if r.cfg.sampler == nil {
		return false
	}
	r.cfg.sampler.SnapshotInto(dst)
	return dst.Samples > 0
}
