package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/memstats"
)

// Detector span and event attributes.
const (
	keyDetName      = attribute.Key("gcprobe.detector.name")
	keyDetValue     = attribute.Key("gcprobe.detector.value")
	keyDetThreshold = attribute.Key("gcprobe.detector.threshold")
	keyDetSince     = attribute.Key("gcprobe.detector.since")
	keyDetFiring    = attribute.Key("gcprobe.detector.firing")
	keyDetDropped   = attribute.Key("gcprobe.detector.dropped")
	keyDetEvents    = attribute.Key("gcprobe.detector.events")
	// finalizer_blocked: the callback that blocks.
	keyDetKind = attribute.Key("gcprobe.detector.kind")
	keyDetSite = attribute.Key("gcprobe.detector.site")
	// A cause detector, firing: the cause in words (memstats.Event.Cause).
	keyDetCause = attribute.Key("gcprobe.detector.cause")
	keyDetFix   = attribute.Key("gcprobe.detector.fix")
)

// detectorQueue hands detector events from the sampler's goroutine to the
// reporter's. push runs inside the sampler's round (memstats.Subscribe
// asks handlers to be quick), so it only appends under a lock and wakes the
// loop without blocking; spans are made on the reporter's goroutine, where
// a slow tracer provider delays nobody else.
type detectorQueue struct {
	mu      sync.Mutex
	events  []memstats.Event
	spare   []memstats.Event // the other buffer, swapped in by take
	limit   int
	dropped uint64
	wake    chan struct{}
}

func (q *detectorQueue) init(limit int) {
	q.limit = limit
	q.events = make([]memstats.Event, 0, limit)
	q.spare = make([]memstats.Event, 0, limit)
	q.wake = make(chan struct{}, 1)
}

// push queues e, or counts it as dropped when the queue is full.
func (q *detectorQueue) push(e memstats.Event) {
	q.mu.Lock()
	if len(q.events) < q.limit {
		q.events = append(q.events, e)
	} else {
		q.dropped++
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// take returns the queued events and the drops since the previous take.
// The returned slice is valid until the next take.
func (q *detectorQueue) take() ([]memstats.Event, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	q.events, q.spare = q.spare[:0], evs
	d := q.dropped
	q.dropped = 0
	return evs, d
}

// reportDetectors emits one gcprobe.detector span for the detector events
// queued since the previous call, each a gcprobe.detector span event at the
// time of the sampling round that produced it. The span starts at the
// first event and ends now.
func (r *Reporter) reportDetectors(ctx context.Context) {
	evs, dropped := r.dets.take()
	if len(evs) == 0 && dropped == 0 {
		return
	}
	start := time.Now()
	if len(evs) > 0 && !evs[0].Time.IsZero() && evs[0].Time.Before(start) {
		start = evs[0].Time
	}
	_, span := r.tracer.Start(ctx, SpanDetector,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			keyDetEvents.Int(len(evs)),
			keyDetDropped.Int64(clampInt64(dropped)),
		),
	)
	for i := range evs {
		span.AddEvent(EventDetector, detectorEventOptions(&evs[i])...)
	}
	clear(evs)
	span.End()
}

func detectorEventOptions(e *memstats.Event) []trace.EventOption {
	opts := []trace.EventOption{trace.WithAttributes(
		keyDetName.String(e.Detector),
		keyDetValue.Float64(e.Value),
		keyDetThreshold.Float64(e.Threshold),
		keyDetSince.String(e.Since.UTC().Format(time.RFC3339Nano)),
		keyDetFiring.Bool(e.Firing),
	)}
	if e.Site != "" {
		opts = append(opts, trace.WithAttributes(keyDetKind.String(e.Kind), keyDetSite.String(e.Site)))
	}
	if c := e.Cause(); c != "" && e.Firing {
		opts = append(opts, trace.WithAttributes(keyDetCause.String(c)))
		if e.Fix != "" {
			opts = append(opts, trace.WithAttributes(keyDetFix.String(e.Fix)))
		}
	}
	if !e.Time.IsZero() {
		opts = append(opts, trace.WithTimestamp(e.Time))
	}
	return opts
}
