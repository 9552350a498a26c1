package k8sfinalizers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Metric names, as documented in the package comment.
const (
	MetricTerminatingObjects = "gcprobe_k8s_terminating_objects"
	MetricTerminatingOldest  = "gcprobe_k8s_terminating_oldest_seconds"
	MetricRemovalSeconds     = "gcprobe_k8s_finalizer_removal_seconds"
)

var labelNames = []string{"group", "version", "kind", "finalizer"}

type descs struct {
	terminating, oldest, removal *prometheus.Desc
}

func newDescs() descs {
	return descs{
		terminating: prometheus.NewDesc(MetricTerminatingObjects,
			"Objects with a deletionTimestamp that still carry this finalizer.",
			labelNames, nil),
		oldest: prometheus.NewDesc(MetricTerminatingOldest,
			"Time since the deletionTimestamp of the oldest object that still carries this finalizer; 0 when there is none.",
			labelNames, nil),
		removal: prometheus.NewDesc(MetricRemovalSeconds,
			"Time from an object's deletionTimestamp to the removal of this finalizer from it (or the object's deletion).",
			labelNames, nil),
	}
}

// Describe sends the descriptors of the three series.
func (w *Watcher) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.descs.terminating
	ch <- w.descs.oldest
	ch <- w.descs.removal
}

// Collect sends, for every kind and every finalizer name seen on one of its
// terminating objects, the number of terminating objects that carry it, the
// age of the oldest, and the removal-time histogram. Its cost is one walk
// over the terminating objects.
func (w *Watcher) Collect(ch chan<- prometheus.Metric) {
	// Build under the lock, send after it: a slow consumer of ch must not
	// hold up the informers' handlers.
	var out []prometheus.Metric
	w.mu.Lock()
	now := w.cfg.clock.Now()
	for _, ks := range w.kinds {
		w.tallyLocked(ks)
		for _, fs := range ks.order {
			lv := []string{ks.gvk.Group, ks.gvk.Version, ks.gvk.Kind, fs.label}
			out = append(out,
				prometheus.MustNewConstMetric(w.descs.terminating, prometheus.GaugeValue, float64(fs.count), lv...),
				prometheus.MustNewConstMetric(w.descs.oldest, prometheus.GaugeValue, ageSeconds(now, fs), lv...),
				prometheus.MustNewConstHistogram(w.descs.removal, fs.removals.n, fs.removals.sum, fs.removals.cumulative(), lv...),
			)
		}
	}
	w.mu.Unlock()
	for _, m := range out {
		ch <- m
	}
}

// tallyLocked fills every finalizer state's count and oldest from the
// terminating objects. An object is counted once per label, even when
// several of its finalizers fold into OtherFinalizer.
func (w *Watcher) tallyLocked(ks *kindState) {
	for _, fs := range ks.order {
		fs.count, fs.oldest = 0, time.Time{}
	}
	for _, o := range ks.objs {
		for _, fs := range o.labels {
			fs.count++
			if fs.oldest.IsZero() || o.deletion.Before(fs.oldest) {
				fs.oldest = o.deletion
			}
		}
	}
}

// age is the time since the oldest deletionTimestamp of fs's objects, 0
// without objects or when the API server's clock is ahead of ours.
func age(now time.Time, fs *finalizerState) time.Duration {
	if fs.count == 0 {
		return 0
	}
	return max(now.Sub(fs.oldest), 0)
}

func ageSeconds(now time.Time, fs *finalizerState) float64 { return age(now, fs).Seconds() }

// Stat is the state of one finalizer name of one kind, as the series show
// it.
type Stat struct {
	GVK schema.GroupVersionKind
	// Finalizer is the finalizer name, or OtherFinalizer.
	Finalizer string
	// Terminating is the number of objects with a deletionTimestamp that
	// still carry the finalizer.
	Terminating int
	// Oldest is the time since the deletionTimestamp of the oldest of
	// them (0 when Terminating is 0).
	Oldest time.Duration
	// Removals is how many times the finalizer was seen removed from a
	// terminating object (or its object deleted); RemovalTime is the sum
	// of the times from deletionTimestamp to removal.
	Removals    uint64
	RemovalTime time.Duration
}

// Stats returns the current state, by kind in WithGVKs order, then by
// finalizer name in the order first seen (OtherFinalizer last).
func (w *Watcher) Stats() []Stat {
	var out []Stat
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.cfg.clock.Now()
	for _, ks := range w.kinds {
		w.tallyLocked(ks)
		for _, fs := range ks.order {
			out = append(out, Stat{
				GVK:         ks.gvk,
				Finalizer:   fs.label,
				Terminating: fs.count,
				Oldest:      age(now, fs),
				Removals:    fs.removals.n,
				RemovalTime: time.Duration(fs.removals.sum * float64(time.Second)),
			})
		}
	}
	return out
}
