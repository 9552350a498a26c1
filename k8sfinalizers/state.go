package k8sfinalizers

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// kindState is what the watcher knows about one GroupVersionKind. It holds
// an entry only for objects that are terminating with a finalizer: the
// informer's store has every object already, and the watcher keeps no
// second copy of it.
type kindState struct {
	gvk schema.GroupVersionKind

	// names maps each admitted finalizer name (at most maxNames) to its
	// state; other collects the names that came later. Admitted names
	// keep their series (at 0) once seen, so that alerts see 0, not
	// absence.
	names map[string]*finalizerState
	other *finalizerState
	order []*finalizerState // admission order, other last once it exists

	objs map[types.UID]*object
}

// finalizerState is the per (kind, finalizer label) state.
type finalizerState struct {
	label    string
	removals histogram

	// Scratch for Collect and Stats, under the watcher's lock.
	count  int
	oldest time.Time
}

// object is a terminating object that still has at least one finalizer.
// Its strings are the informer's own (shared, not copied); the finalizer
// slice is cloned because it is compared with the next version.
type object struct {
	namespace, name string
	uid             types.UID
	deletion        time.Time // the object's deletionTimestamp (1 s resolution)
	finalizers      []string  // as last seen, raw names
	// labels are the distinct states finalizers are counted under (a
	// name past the bound folds into other), so that a scrape walks
	// pointers instead of looking names up.
	labels   []*finalizerState
	reported bool // reported as stuck
}

func newKindState(gvk schema.GroupVersionKind) *kindState {
	return &kindState{
		gvk:   gvk,
		names: map[string]*finalizerState{},
		objs:  map[types.UID]*object{},
	}
}

// finalizer returns the state a finalizer name is counted under, admitting
// the name if there is room.
func (ks *kindState) finalizer(name string, maxNames int, buckets []float64) *finalizerState {
	if fs, ok := ks.names[name]; ok {
		return fs
	}
	if len(ks.names) < maxNames {
		fs := &finalizerState{label: name, removals: newHistogram(buckets)}
		ks.names[name] = fs
		// Keep other last in the order.
		if ks.other != nil {
			ks.order = slices.Insert(ks.order, len(ks.order)-1, fs)
		} else {
			ks.order = append(ks.order, fs)
		}
		return fs
	}
	if ks.other == nil {
		ks.other = &finalizerState{label: OtherFinalizer, removals: newHistogram(buckets)}
		ks.order = append(ks.order, ks.other)
	}
	return ks.other
}

// handler receives one kind's informer events. Events of one informer
// reach it one at a time; the objects are the informer's and must not be
// modified.
type handler struct {
	w  *Watcher
	ks *kindState
}

var _ toolscache.ResourceEventHandler = (*handler)(nil)

// OnAdd is called for each object listed at start and each created.
func (h *handler) OnAdd(obj any, _ bool) {
	if m, ok := obj.(metav1.Object); ok {
		h.w.observe(h.ks, m)
	}
}

// OnUpdate is called for each change (and resync) of an object.
func (h *handler) OnUpdate(_, newObj any) {
	if m, ok := newObj.(metav1.Object); ok {
		h.w.observe(h.ks, m)
	}
}

// OnDelete is called when an object is gone, possibly with only its last
// known state when the watch missed the deletion.
func (h *handler) OnDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		h.w.gone(h.ks, m)
	}
}

// keyOf identifies an object: by UID, which a re-created object of the
// same name does not share, or by namespace/name for objects without one
// (hand-made test objects).
func keyOf(m metav1.Object) types.UID {
	if uid := m.GetUID(); uid != "" {
		return uid
	}
	return types.UID(m.GetNamespace() + "/" + m.GetName())
}

// observe records the current state of an object. An object that is
// terminating with finalizers is tracked; finalizers that disappeared from
// a tracked object count as removed now.
func (w *Watcher) observe(ks *kindState, m metav1.Object) {
	dt := m.GetDeletionTimestamp()
	fins := m.GetFinalizers()
	key := keyOf(m)
	var logRelease func()
	defer func() {
		if logRelease != nil {
			logRelease() // after Unlock: never log under the lock
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	o := ks.objs[key]
	if dt == nil || len(fins) == 0 {
		if o != nil {
			// Its last finalizers went; the object is deleted next.
			logRelease = w.removedLocked(ks, o, o.finalizers)
			delete(ks.objs, key)
		}
		return
	}
	if o == nil {
		o = &object{
			namespace:  m.GetNamespace(),
			name:       m.GetName(),
			uid:        m.GetUID(),
			deletion:   dt.Time,
			finalizers: slices.Clone(fins),
		}
		o.labels = w.labelsLocked(ks, fins, nil)
		ks.objs[key] = o
		return
	}
	o.deletion = dt.Time
	if slices.Equal(o.finalizers, fins) {
		return // a resync, or a change elsewhere in the object
	}
	var removed []string
	for _, f := range o.finalizers {
		if !slices.Contains(fins, f) {
			removed = append(removed, f)
		}
	}
	logRelease = w.removedLocked(ks, o, removed)
	o.finalizers = slices.Clone(fins)
	o.labels = w.labelsLocked(ks, fins, o.labels[:0])
}

// labelsLocked appends to buf the distinct states that fins are counted
// under, admitting new names if there is room.
func (w *Watcher) labelsLocked(ks *kindState, fins []string, buf []*finalizerState) []*finalizerState {
	for _, f := range fins {
		fs := ks.finalizer(f, w.cfg.maxNames, w.cfg.buckets)
		if !slices.Contains(buf, fs) {
			buf = append(buf, fs)
		}
	}
	return buf
}

// gone handles the deletion of an object: whatever finalizers it still had
// when last seen were removed (the API server deletes a terminating object
// once its last finalizer goes).
func (w *Watcher) gone(ks *kindState, m metav1.Object) {
	key := keyOf(m)
	var logRelease func()
	w.mu.Lock()
	if o := ks.objs[key]; o != nil {
		logRelease = w.removedLocked(ks, o, o.finalizers)
		delete(ks.objs, key)
	}
	w.mu.Unlock()
	if logRelease != nil {
		logRelease()
	}
}

// removedLocked records the removal of names from o, now: the time since
// o's deletionTimestamp goes into each name's histogram. For an object
// reported as stuck, it returns a function that logs the release, for the
// caller to run once it has released the lock.
func (w *Watcher) removedLocked(ks *kindState, o *object, names []string) (logRelease func()) {
	if len(names) == 0 {
		return nil
	}
	d := w.cfg.clock.Since(o.deletion)
	if d < 0 {
		// The API server's clock is ahead of ours.
		d = 0
	}
	for _, f := range names {
		ks.finalizer(f, w.cfg.maxNames, w.cfg.buckets).removals.observe(d.Seconds())
	}
	if !o.reported || w.cfg.logger == nil {
		return nil
	}
	gvk, ns, name, left := ks.gvk, o.namespace, o.name, len(o.finalizers)-len(names)
	names = slices.Clone(names)
	return func() {
		w.cfg.logger.Info("gcprobe: finalizers removed from a stuck object",
			"group", gvk.Group, "version", gvk.Version, "kind", gvk.Kind,
			"namespace", ns, "name", name,
			"removed", names, "remaining", left, "terminating_for", d)
	}
}

// histogram is a cumulative-ready bucket count, as Prometheus wants it.
type histogram struct {
	bounds []float64 // shared, read-only
	counts []uint64  // per bucket (not cumulative); len(bounds)+1, the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // first bound >= v: Prometheus's le
	h.counts[i]++
	h.sum += v
	h.n++
}

// cumulative returns the bucket map of prometheus.NewConstHistogram.
func (h *histogram) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(h.bounds))
	var c uint64
	for i, b := range h.bounds {
		c += h.counts[i]
		m[b] = c
	}
	return m
}
