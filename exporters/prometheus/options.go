package promexporter

import (
	"errors"
	"fmt"
	"iter"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/gcclock"
	"github.com/gcprobe/probe/memstats"
)

// DefaultTopK is how many sites get series of their own unless WithTopK
// says otherwise: finalizerwatch.DefaultTopK, the one default of a
// reader's top K.
const DefaultTopK = finalizerwatch.DefaultTopK

// Option configures a Collector. An Option rejects a bad value with an
// error, which New returns.
type Option func(*config) error

type config struct {
	watcher   *finalizerwatch.Watcher
	snapshot  func() memstats.Snapshot
	topK      int
	detectors iter.Seq2[string, bool]
	own       func(finalizerwatch.Kind) uint64
	heap      func() heapprofile.Snapshot // WithHeapProfile (gccause.go)
	causes    iter.Seq2[string, string]   // WithCauses (gccause.go)
	// sentinelRuns counts the runs of the process's GC-cycle sentinels
	// (gcclock.Runs); tests replace it.
	sentinelRuns func(finalizerwatch.Kind) uint64
}

func defaultConfig() config {
	return config{watcher: finalizerwatch.Default, topK: DefaultTopK,
		sentinelRuns: func(k finalizerwatch.Kind) uint64 { return gcclock.Runs(gcclock.Kind(k)) }}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("promexporter: New: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// WithWatcher makes the collector export the ledger of w instead of
// finalizerwatch.Default. w must not be nil.
func WithWatcher(w *finalizerwatch.Watcher) Option {
	return func(c *config) error {
		if w == nil {
			return errors.New("promexporter: WithWatcher: nil Watcher")
		}
		c.watcher = w
		return nil
	}
}

// WithSnapshotFunc sets the source of the runtime-level series (queues,
// pauses, forced cycles, GC CPU fraction, unwatched callbacks): fn is called
// once per Collect. A memstats.Sampler's Snapshot method fits. Without it,
// or with nil, those series are omitted and the collector exports the
// ledger alone.
func WithSnapshotFunc(fn func() memstats.Snapshot) Option {
	return func(c *config) error {
		c.snapshot = fn
		return nil
	}
}

// WithTopK sets how many sites get series of their own (default
// DefaultTopK): the K sites of either kind most likely to leak
// (finalizerwatch.ReadOptions.TopK); the others are summed under
// site="other", one per kind, so a collector exports at most K+2 series
// per per-site metric. k must be at least 1 (finalizerwatch.CheckTopK).
// The collector exports the top sites its Read returns as they are: the
// cut to K is Read's.
func WithTopK(k int) Option {
	return func(c *config) error {
		if err := finalizerwatch.CheckTopK(k); err != nil {
			return fmt.Errorf("promexporter: %w", err)
		}
		c.topK = k
		return nil
	}
}

// WithDetectors exports gcprobe_detector_firing: on each Collect the
// collector ranges over detectors, which yields every detector it knows by
// name with whether it is firing now. Yield a detector that is not firing
// too, so that its series reads 0 rather than going absent; a name yielded
// twice is exported once, with its first state. WithSampler sets the
// detectors of a memstats.Sampler. Without it, or with nil, the series is omitted.
func WithDetectors(detectors iter.Seq2[string, bool]) Option {
	return func(c *config) error {
		c.detectors = detectors
		return nil
	}
}

// WithSampler takes the runtime-level series from s: it is
// WithSnapshotFunc(s.Snapshot) and WithDetectors of the sampler's
// detectors (each memstats.Detector* name, firing when s.Active reports
// it, then any other detector s.Active reports). s must not be nil; the
// collector does not start or stop it.
func WithSampler(s *memstats.Sampler) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("promexporter: WithSampler: nil Sampler")
		}
		c.snapshot = s.Snapshot
		c.detectors = samplerDetectors(s)
		return nil
	}
}

// WithOwnCallbacksFunc tells the collector how many finalizers (kind
// finalizerwatch.KindFinalizer) and cleanups (KindCleanup) the runtime has
// run on behalf of the program's own instrumentation outside the watcher,
// so that gcprobe_finalizers_unwatched_total does not count them. The GC-cycle
// sentinels that the watcher and a memstats.Sampler share (one chain per
// process) are subtracted without it. fn must return a count that never
// decreases; it is called once per kind and Collect.
func WithOwnCallbacksFunc(fn func(finalizerwatch.Kind) uint64) Option {
	return func(c *config) error {
		c.own = fn
		return nil
	}
}
