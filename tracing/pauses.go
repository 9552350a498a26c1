package tracing

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/memstats"
)

// GC pause span attributes.
const (
	keyPauseCycle     = attribute.Key("gcprobe.gc.cycle")
	keyPauseNs        = attribute.Key("gcprobe.gc.pause_ns")
	keyHeapLiveBefore = attribute.Key("gcprobe.heap.live_before_bytes")
	keyHeapLiveAfter  = attribute.Key("gcprobe.heap.live_after_bytes")
	keyPauseSampledAt = attribute.Key("gcprobe.gc.sampled_cycle")
)

const (
	liveHistory        = 8 // cycles whose live heap is remembered
	pauseBufferInitCap = 16
)

// liveObs is the live heap the sampler reported after one GC cycle.
type liveObs struct {
	cycle, bytes uint64
	ok           bool
}

// pauseState is what ReportPauses keeps between calls. Its mutex makes
// concurrent calls (the loop and a caller) report each pause once.
type pauseState struct {
	mu    sync.Mutex
	since uint64           // the latest cycle reported on
	buf   []memstats.Pause // reused by every poll
	snap  memstats.Snapshot
	live  [liveHistory]liveObs // indexed by cycle % liveHistory
}

func (p *pauseState) init() {
	p.buf = make([]memstats.Pause, 0, pauseBufferInitCap)
}

// remember records the live heap after snapshot's cycle.
func (p *pauseState) remember(s *memstats.Snapshot) {
	p.live[s.Cycles%liveHistory] = liveObs{cycle: s.Cycles, bytes: s.HeapLive, ok: true}
}

// liveAfter returns the live heap observed after cycle, if it was.
func (p *pauseState) liveAfter(cycle uint64) (uint64, bool) {
	o := p.live[cycle%liveHistory]
	if !o.ok || o.cycle != cycle {
		return 0, false
	}
	return o.bytes, true
}

// ReportPauses emits a gcprobe.gc_pause span for each GC pause at least as
// long as the threshold that no earlier call has reported, as a child of
// any span in ctx, and returns how many it emitted. A running reporter
// calls it every pause poll interval; the first call also reports the
// pauses the source still holds from before the reporter was made.
// Without a pause source (no WithSampler, no WithPauseSource) it does
// nothing.
func (r *Reporter) ReportPauses(ctx context.Context) int {
	src := r.cfg.pauses
	if src == nil {
		return 0
	}
	p := &r.pauses
	p.mu.Lock()
	defer p.mu.Unlock()

	haveSnap := r.snapshot(&p.snap)
	if haveSnap {
		p.remember(&p.snap)
	}
	p.buf = src(p.since, p.buf[:0])
	n := 0
	for i := range p.buf {
		pause := &p.buf[i]
		if pause.Cycle <= p.since {
			// A source that ignores since must not make us report
			// a pause twice.
			continue
		}
		p.since = pause.Cycle
		if pause.Duration < r.cfg.pauseThreshold {
			continue
		}
		r.pauseSpan(ctx, pause, haveSnap)
		n++
	}
	clear(p.buf) // nothing to keep alive, but keep the slice tidy
	return n
}

// pauseSpan emits the span of one pause. The span covers the pause's
// stop-the-world time ending at pause.End; a cycle has two pauses (sweep
// termination and mark termination) and the runtime reports their sum, so
// the span's start is approximate while its length is exact.
func (r *Reporter) pauseSpan(ctx context.Context, pause *memstats.Pause, haveSnap bool) {
	p := &r.pauses
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		keyPauseCycle.Int64(clampInt64(pause.Cycle)),
		keyPauseNs.Int64(pause.Duration.Nanoseconds()),
	)
	if haveSnap {
		if b, ok := p.liveAfter(pause.Cycle - 1); ok {
			attrs = append(attrs, keyHeapLiveBefore.Int64(clampInt64(b)))
		}
		if b, ok := p.liveAfter(pause.Cycle); ok {
			attrs = append(attrs, keyHeapLiveAfter.Int64(clampInt64(b)))
		}
		attrs = append(attrs,
			keyPauseSampledAt.Int64(clampInt64(p.snap.Cycles)),
			keyFinQueue.Int64(clampInt64(p.snap.Finalizers.Length)),
			keyClnQueue.Int64(clampInt64(p.snap.Cleanups.Length)),
		)
	}
	_, span := r.tracer.Start(ctx, SpanGCPause,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(pause.End.Add(-pause.Duration)),
		trace.WithAttributes(attrs...),
	)
	span.End(trace.WithTimestamp(pause.End))
}
