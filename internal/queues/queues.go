// Package queues reads how far the runtime's finalizer and cleanup
// goroutines have got, from runtime/metrics: what finalizertest waits on
// before it judges, and what tests wait on to know the queues drained.
package queues

import (
	"runtime/metrics"
)

// The runtime/metrics that say how far the finalizer and cleanup
// goroutines have got. Both "executed" counters are bumped only after a
// whole block of callbacks has returned, so executed >= queued means every
// callback queued up to that point has finished.
var names = [...]string{
	"/gc/finalizers/queued:finalizers",
	"/gc/finalizers/executed:finalizers",
	"/gc/cleanups/queued:cleanups",
	"/gc/cleanups/executed:cleanups",
}

// Counts is one reading of the four counters, in their order: finalizers
// queued and executed, cleanups queued and executed.
type Counts [len(names)]uint64

// Reader reads the counters into a slice it reuses. A metric the running
// Go does not have reads as 0 for both of its counters, which makes its
// queue look drained (finalizertest.Find then relies on the watcher's GC
// clock alone).
type Reader struct {
	samples []metrics.Sample
}

// NewReader returns a Reader.
func NewReader() *Reader {
	r := &Reader{samples: make([]metrics.Sample, len(names))}
	for i, name := range names {
		r.samples[i].Name = name
	}
	return r
}

// Read reads the four counters.
func (r *Reader) Read() Counts {
	metrics.Read(r.samples)
	var c Counts
	for i, s := range r.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			c[i] = s.Value.Uint64()
		}
	}
	return c
}

// DrainedSince reports whether every finalizer and cleanup that had been
// queued when mark was read has since finished running.
func (c Counts) DrainedSince(mark Counts) bool {
	return c[1] >= mark[0] && c[3] >= mark[2]
}
