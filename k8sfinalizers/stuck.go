package k8sfinalizers

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ScopeName is the name of the tracer the watcher's spans come from.
const ScopeName = "github.com/gcprobe/probe/k8sfinalizers"

// Span and event names, as documented in the package comment.
const (
	SpanStuckObjects = "gcprobe.k8s.stuck_objects"
	EventStuckObject = "gcprobe.k8s.stuck_object"
)

// StuckObject is an object that has stayed terminating with finalizers for
// longer than the stuck threshold.
type StuckObject struct {
	GVK       schema.GroupVersionKind
	Namespace string // empty for cluster-scoped objects
	Name      string
	UID       types.UID
	// Finalizers are the finalizers still on the object.
	Finalizers []string
	// DeletionTimestamp is when deletion started; Age is the time since.
	DeletionTimestamp time.Time
	Age               time.Duration
}

// check reports the objects that crossed the stuck threshold since the last
// check, at most maxReports of them; the others wait for the next check.
// Each object is reported once.
func (w *Watcher) check() {
	stuck, pending := w.collectStuck()
	if len(stuck) == 0 {
		return
	}
	w.report(stuck, pending)
}

// collectStuck marks and returns the newly stuck objects, oldest first, and
// how many more are stuck but left for the next checks.
func (w *Watcher) collectStuck() (stuck []StuckObject, pending int) {
	type candidate struct {
		ks *kindState
		o  *object
	}
	var cands []candidate
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.cfg.clock.Now()
	for _, ks := range w.kinds {
		for _, o := range ks.objs {
			if !o.reported && now.Sub(o.deletion) >= w.cfg.stuckAfter {
				cands = append(cands, candidate{ks, o})
			}
		}
	}
	// Oldest first, so that a backlog is reported in the order it formed;
	// ties by namespace and name, so that the order is stable.
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := a.o.deletion.Compare(b.o.deletion); c != 0 {
			return c
		}
		if c := strings.Compare(a.o.namespace, b.o.namespace); c != 0 {
			return c
		}
		return strings.Compare(a.o.name, b.o.name)
	})
	if len(cands) > w.cfg.maxReports {
		pending = len(cands) - w.cfg.maxReports
		cands = cands[:w.cfg.maxReports]
	}
	stuck = make([]StuckObject, 0, len(cands))
	for _, c := range cands {
		c.o.reported = true
		stuck = append(stuck, StuckObject{
			GVK:               c.ks.gvk,
			Namespace:         c.o.namespace,
			Name:              c.o.name,
			UID:               c.o.uid,
			Finalizers:        slices.Clone(c.o.finalizers),
			DeletionTimestamp: c.o.deletion,
			Age:               now.Sub(c.o.deletion),
		})
	}
	return stuck, pending
}

// report logs, traces and calls back for each stuck object, outside the
// lock.
func (w *Watcher) report(stuck []StuckObject, pending int) {
	if l := w.cfg.logger; l != nil {
		for _, s := range stuck {
			l.Warn("gcprobe: object stuck terminating: its finalizers have not been removed",
				"group", s.GVK.Group, "version", s.GVK.Version, "kind", s.GVK.Kind,
				"namespace", s.Namespace, "name", s.Name, "uid", string(s.UID),
				"finalizers", s.Finalizers,
				"deletion_timestamp", s.DeletionTimestamp.UTC().Format(time.RFC3339),
				"terminating_for", s.Age.Round(time.Second),
				"stuck_after", w.cfg.stuckAfter)
		}
		if pending > 0 {
			l.Warn("gcprobe: more objects stuck terminating; they are reported by the next checks",
				"pending", pending, "max_reports_per_check", w.cfg.maxReports)
		}
	}
	if tp := w.cfg.tracerProvider; tp != nil {
		_, span := tp.Tracer(ScopeName).Start(context.Background(), SpanStuckObjects,
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(
				attribute.Int("gcprobe.k8s.stuck_objects", len(stuck)),
				attribute.Int("gcprobe.k8s.stuck_objects.pending", pending),
				attribute.Int64("gcprobe.k8s.stuck_after_ns", int64(w.cfg.stuckAfter)),
			))
		for _, s := range stuck {
			span.AddEvent(EventStuckObject, trace.WithAttributes(
				attribute.String("k8s.object.group", s.GVK.Group),
				attribute.String("k8s.object.version", s.GVK.Version),
				attribute.String("k8s.object.kind", s.GVK.Kind),
				attribute.String("k8s.namespace.name", s.Namespace),
				attribute.String("k8s.object.name", s.Name),
				attribute.String("k8s.object.uid", string(s.UID)),
				attribute.StringSlice("gcprobe.k8s.finalizers", s.Finalizers),
				attribute.Int64("gcprobe.k8s.terminating_ns", int64(s.Age)),
			))
		}
		span.End()
	}
	if fn := w.cfg.stuckFunc; fn != nil {
		for _, s := range stuck {
			fn(s)
		}
	}
}
