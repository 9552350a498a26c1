package finalizertest

import (
	"runtime/metrics"
)

// The runtime/metrics that say how far the finalizer and cleanup
// goroutines have got. Both "executed" counters are bumped only after a
// whole block of callbacks has returned, so executed >= queued means every
// callback queued up to that point has finished.
var queueMetrics = [...]string{
	"/gc/finalizers/queued:finalizers",
	"/gc/finalizers/executed:finalizers",
	"/gc/cleanups/queued:cleanups",
	"/gc/cleanups/executed:cleanups",
}

// queueCounts is one reading of queueMetrics, in their order.
type queueCounts [len(queueMetrics)]uint64

// queueReader reads queueMetrics into a slice it reuses. A metric the
// running Go does not have reads as 0 for both of its counters, which
// makes its queue look drained: Find then relies on the watcher's GC
// clock alone.
type queueReader struct {
	samples []metrics.Sample
}

func newQueueReader() *queueReader {
	r := &queueReader{samples: make([]metrics.Sample, len(queueMetrics))}
	for i, name := range queueMetrics {
		r.samples[i].Name = name
	}
	return r
}

func (r *queueReader) read() queueCounts {
	metrics.Read(r.samples)
	var c queueCounts
	for i, s := range r.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			c[i] = s.Value.Uint64()
		}
	}
	return c
}

// drainedSince reports whether every finalizer and cleanup that had been
// queued when mark was read has since finished running.
func (c queueCounts) drainedSince(mark queueCounts) bool {
	return c[1] >= mark[0] && c[3] >= mark[2]
}
