package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/memstats"
)

// Errors wrapped by Start and Run; the same values as memstats' and the
// root package's, so errors.Is works with any of them.
var (
	// ErrRunning is wrapped by the error of Start or Run while the
	// reporter already runs.
	ErrRunning = lifecycle.ErrRunning
	// ErrStopped is wrapped by the error of Start or Run after Stop, or
	// after a Run has ended: a reporter runs once.
	ErrStopped = lifecycle.ErrStopped
)

// ScopeName is the instrumentation scope of the reporter's tracer.
const ScopeName = "github.com/gcprobe/probe/tracing"

// Reporter turns the finalizer ledger and the GC sampler into spans: a
// periodic leak report, a span per long GC pause, and a span per batch of
// detector events. Create it with New; see the package documentation.
type Reporter struct {
	cfg    config
	tracer trace.Tracer

	pauses pauseState
	dets   detectorQueue

	life lifecycle.Lifecycle // idle → running → stopped, once
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
	r.life.Name = "tracing: Reporter"
	return r, nil
}

// Start runs the reporter in a background goroutine until Stop. A
// reporter runs once: Start returns an error wrapping ErrRunning if it
// already runs, and ErrStopped once it has been stopped (make a new
// Reporter instead).
func (r *Reporter) Start() error {
	return r.life.Start(func() error {
		done := r.life.Done()
		r.life.Go(func() { r.loop(context.Background(), done) })
		return nil
	}, nil)
}

// Run runs the reporter until ctx is done or Stop is called, then stops it
// and returns nil: the shape of a controller-runtime manager.RunnableFunc.
// Like Start, it runs a reporter once: it returns an error wrapping
// ErrRunning if the reporter already runs, and ErrStopped once it has been
// stopped or a Run has ended.
func (r *Reporter) Run(ctx context.Context) error {
	return r.life.Run(ctx, nil, func(ctx context.Context) {
		// ctx carries what the caller put in it (a parent span, say)
		// to the spans, even those of the final flush.
		r.loop(context.WithoutCancel(ctx), ctx.Done())
	}, nil)
}

// Stop stops the reporter and waits for its goroutine (or Run) to end; the
// pauses and detector events seen by then are reported first. Stop is
// idempotent and safe to call concurrently, also on a reporter that never
// ran; a stopped reporter cannot be started again, but ReportNow and
// ReportPauses keep working.
func (r *Reporter) Stop() { _ = r.life.Stop(nil) }

// loop is the reporter's goroutine. Everything that creates spans on a
// schedule runs here, never on the sampler's goroutine: a tracer provider
// with a synchronous exporter may block, and the sampler must not.
//
// ctx is only a carrier of the spans' parent, never done, so that the
// final flush still reports; done ends the loop.
func (r *Reporter) loop(ctx context.Context, done <-chan struct{}) {
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
		case <-done:
			if unsubscribe != nil {
				unsubscribe()
			}
			// Report what has been seen.
			r.ReportPauses(ctx)
			r.reportDetectors(ctx)
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
