package reconciletrace

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/memstats"
)

// Span attributes set by the wrapper; see the package documentation.
const (
	keyController    = attribute.Key("gcprobe.controller.name")
	keyNamespace     = attribute.Key("k8s.namespace.name")
	keyName          = attribute.Key("gcprobe.reconcile.name")
	keyRequest       = attribute.Key("gcprobe.reconcile.request")
	keyCycles        = attribute.Key("gcprobe.gc.cycles")
	keyPauses        = attribute.Key("gcprobe.gc.pauses")
	keyPauseTotal    = attribute.Key("gcprobe.gc.pause_total_ns")
	keyPauseMax      = attribute.Key("gcprobe.gc.pause_max_ns")
	keyAllocated     = attribute.Key("gcprobe.heap.allocated_bytes")
	keyRequeue       = attribute.Key("gcprobe.reconcile.requeue")
	keyRequeueAfter  = attribute.Key("gcprobe.reconcile.requeue_after_ns")
	keyTerminalError = attribute.Key("gcprobe.reconcile.terminal_error")
	keyPanic         = attribute.Key("gcprobe.reconcile.panic")
)

// Wrap returns a reconcile.Reconciler that runs r inside a span carrying
// the GC activity that overlapped each reconcile; see the package
// documentation. s supplies the GC pause history and may be nil (pauses
// are then read from the runtime directly; see the package documentation).
// It returns an error for a nil r or a bad option.
func Wrap(r reconcile.Reconciler, s *memstats.Sampler, opts ...Option) (reconcile.Reconciler, error) {
	return WrapTyped(r, s, opts...)
}

// WrapTyped is Wrap for a reconciler of any request type
// (reconcile.TypedReconciler). A request that implements fmt.Stringer is
// recorded as gcprobe.reconcile.request.
func WrapTyped[req comparable](r reconcile.TypedReconciler[req], s *memstats.Sampler, opts ...Option) (reconcile.TypedReconciler[req], error) {
	if r == nil {
		return nil, errors.New("reconciletrace: nil Reconciler")
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	w := &reconciler[req]{
		inner:   r,
		sampler: s,
		tracer:  cfg.provider.Tracer(ScopeName),
		name:    cfg.spanName,
		newSpan: cfg.newSpan,
		heap:    cfg.heap,
		causes:  cfg.causes,
	}
	// Built once: every reconcile's span starts with these options.
	w.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if cfg.controller != "" {
		w.controller = []attribute.KeyValue{keyController.String(cfg.controller)}
		w.startOpts = append(w.startOpts, trace.WithAttributes(w.controller...))
	}
	return w, nil
}

// reconciler is the wrapper.
type reconciler[req comparable] struct {
	inner      reconcile.TypedReconciler[req]
	sampler    *memstats.Sampler
	tracer     trace.Tracer
	name       string
	newSpan    bool
	controller []attribute.KeyValue
	startOpts  []trace.SpanStartOption
	heap       func() heapprofile.Snapshot
	causes     func() []string
}

// Reconcile runs the wrapped reconciler in a span. A panic in it is
// recorded on the span and panics on, for controller-runtime's own
// recovery to handle.
func (w *reconciler[req]) Reconcile(ctx context.Context, request req) (res reconcile.Result, err error) {
	span := trace.SpanFromContext(ctx)
	own := w.newSpan || !span.IsRecording()
	if own {
		ctx, span = w.tracer.Start(ctx, w.name, w.startOpts...)
	} else if len(w.controller) > 0 {
		span.SetAttributes(w.controller...)
	}
	if !span.IsRecording() {
		// Sampled out: measure nothing.
		defer span.End()
		return w.inner.Reconcile(ctx, request)
	}
	start := readGC()
	panicking := true
	defer func() {
		end := readGC()
		w.finish(span, request, start, end, res, err)
		if panicking {
			v := recover()
			if v == nil {
				// runtime.Goexit, not a panic (panic(nil) recovers
				// a *runtime.PanicNilError): let it go on.
				if own {
					span.End()
				}
				return
			}
			span.SetAttributes(keyPanic.Bool(true))
			span.RecordError(fmt.Errorf("panic: %v", v), trace.WithStackTrace(true))
			span.SetStatus(codes.Error, "panic")
			if own {
				span.End()
			}
			panic(v)
		}
		if own {
			span.End()
		}
	}()
	res, err = w.inner.Reconcile(ctx, request)
	panicking = false
	return res, err
}

// finish sets the attributes and status of a reconcile's span.
func (w *reconciler[req]) finish(span trace.Span, request req, start, end gcReading, res reconcile.Result, err error) {
	ps := pauses(w.sampler, start, end)
	var allocated uint64
	if end.allocs > start.allocs {
		allocated = end.allocs - start.allocs
	}
	// Requeue is deprecated in favour of RequeueAfter, but controller-runtime
	// still honours it: report what the reconciler asked for.
	//lint:ignore SA1019 see above
	requeue := res.Requeue || res.RequeueAfter > 0
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = appendRequest(attrs, request)
	attrs = append(attrs,
		keyCycles.Int64(int64(end.cycles-start.cycles)),
		keyPauses.Int(ps.count),
		keyPauseTotal.Int64(ps.total.Nanoseconds()),
		keyPauseMax.Int64(ps.max.Nanoseconds()),
		keyAllocated.Int64(clampInt64(allocated)),
		keyRequeue.Bool(requeue),
		keyRequeueAfter.Int64(res.RequeueAfter.Nanoseconds()),
	)
	if err != nil {
		attrs = append(attrs, keyTerminalError.Bool(errors.Is(err, reconcile.TerminalError(nil))))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attrs...)
	addAllocSites(span, w.heap, start, end)
	addCauses(span, w.causes, start, end)
}

// appendRequest adds the attributes that identify the request.
func appendRequest[req comparable](attrs []attribute.KeyValue, request req) []attribute.KeyValue {
	switch r := any(request).(type) {
	case reconcile.Request:
		if r.Namespace != "" {
			attrs = append(attrs, keyNamespace.String(r.Namespace))
		}
		return append(attrs, keyName.String(r.Name))
	case fmt.Stringer:
		return append(attrs, keyRequest.String(r.String()))
	}
	return attrs
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
