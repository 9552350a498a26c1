package k8sfinalizers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gcprobe/probe/internal/lifecycle"
)

// ErrAlreadyRegistered is wrapped by the error Start returns when the
// registerer already has a k8sfinalizers collector, typically a second
// Watcher.
var ErrAlreadyRegistered = errors.New("k8sfinalizers: a collector of these series is already registered on this registerer")

// Errors wrapped by Start; the same values as the root package's (and
// memstats' and tracing's), so errors.Is works with any of them. Their one
// source is internal/lifecycle, as the root package's is: naming
// probe.ErrRunning here instead would link the whole probe (its
// exporters, OpenTelemetry, the pprof encoder) into every user of this
// module for two values it already shares.
var (
	// ErrRunning is wrapped by the error of Start while the watcher's
	// Start already runs.
	ErrRunning = lifecycle.ErrRunning
	// ErrStopped is wrapped by the error of Start once a Start has ended
	// (or failed): a watcher runs once.
	ErrStopped = lifecycle.ErrStopped
)

// InformerSource is the part of a controller-runtime cache the watcher
// needs: cache.Cache, cache.Informers and a manager's GetCache() satisfy
// it.
type InformerSource interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// Watcher tracks, per GroupVersionKind and finalizer name, the objects that
// are terminating (deletionTimestamp set) while that finalizer is still on
// them, and how long finalizers take to go once deletion starts. It is a
// prometheus.Collector and a controller-runtime manager.Runnable. Create it
// with New.
type Watcher struct {
	cfg   config
	descs descs

	// mu guards the kinds' state. One lock for everything: informer
	// events arrive one handler call at a time per kind, scrapes and
	// checks are rare, and every critical section is short (a map
	// lookup, or a walk over the terminating objects only, never over
	// every object watched).
	mu    sync.Mutex
	kinds []*kindState // in WithGVKs order

	runMu    sync.Mutex // guards watched and handlers
	watched  bool
	handlers []toolscache.ResourceEventHandlerRegistration // from Watch

	life lifecycle.Lifecycle // Start's: idle → running → stopped, once
}

var (
	_ prometheus.Collector           = (*Watcher)(nil)
	_ manager.Runnable               = (*Watcher)(nil)
	_ manager.LeaderElectionRunnable = (*Watcher)(nil)
)

// New returns a watcher configured by opts. It watches nothing until Watch
// or SetupWithManager hands it informers.
func New(opts ...Option) (*Watcher, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, descs: newDescs()}
	w.life.Name, w.life.RunName = "k8sfinalizers: Watcher", "Start"
	for _, gvk := range cfg.gvks {
		w.kinds = append(w.kinds, newKindState(gvk))
	}
	return w, nil
}

// SetupWithManager watches the configured kinds through mgr's cache (see
// Watch) and adds the watcher to mgr as a Runnable, so that the manager
// starts it (Start registers the series and runs the stuck checks) and
// stops it. Call it before mgr.Start, like a controller's SetupWithManager.
func (w *Watcher) SetupWithManager(mgr manager.Manager) error {
	if err := w.Watch(context.Background(), mgr.GetCache()); err != nil {
		return err
	}
	if err := mgr.Add(w); err != nil {
		return fmt.Errorf("k8sfinalizers: adding the watcher to the manager: %w", err)
	}
	return nil
}

// Watch gets a metadata-only informer (metav1.PartialObjectMetadata) for
// each configured kind from src and adds the watcher's event handlers to
// it. Nothing but the objects' metadata is listed, watched or cached, and
// the handlers read the informer's objects without copying them. If the
// program's controllers watch the same kind with builder.OnlyMetadata, they
// share one informer and one watch; a controller that watches full objects
// of the kind has an informer of its own besides.
//
// Watch does not wait for the informers to sync and may be called before
// the cache starts. It may be called once. With a plain cache (no
// manager), run the cache and Start yourself.
func (w *Watcher) Watch(ctx context.Context, src InformerSource) error {
	if src == nil {
		return errors.New("k8sfinalizers: Watch: nil InformerSource")
	}
	w.runMu.Lock()
	defer w.runMu.Unlock()
	if w.watched {
		return errors.New("k8sfinalizers: Watch: already watching")
	}
	for _, ks := range w.kinds {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(ks.gvk)
		inf, err := src.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("k8sfinalizers: getting a metadata informer for %s: %w", gvkString(ks.gvk), err)
		}
		reg, err := inf.AddEventHandler(&handler{w: w, ks: ks})
		if err != nil {
			return fmt.Errorf("k8sfinalizers: adding the event handler for %s: %w", gvkString(ks.gvk), err)
		}
		w.handlers = append(w.handlers, reg)
	}
	w.watched = true
	return nil
}

// HasSynced reports whether Watch has been called and the watcher's event
// handlers have seen every informer's initial list: from then on the
// series describe every object of the watched kinds. Stopping the cache
// before that leaves a goroutine of controller-runtime's multi-namespace
// cache waiting for ever (it waits for each handler to sync), so a program
// or test that starts and soon stops a cache should wait for HasSynced
// first, as for the informers' own.
func (w *Watcher) HasSynced() bool {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	if !w.watched {
		return false
	}
	for _, h := range w.handlers {
		if !h.HasSynced() {
			return false
		}
	}
	return true
}

// Start registers the watcher's collector on the registerer (default
// controller-runtime's metrics.Registry) and checks for stuck objects every
// check interval until ctx ends; then it unregisters the collector and
// returns nil. It returns at once with an error if the collector cannot be
// registered (ErrAlreadyRegistered for a second watcher on the same
// registerer), if Start already runs (ErrRunning), or if a Start has ended
// or failed before (ErrStopped): like the probe, a watcher runs once. With
// this signature a *Watcher is a controller-runtime manager.Runnable.
func (w *Watcher) Start(ctx context.Context) error {
	registered := false
	return w.life.Run(ctx, func() error {
		if err := w.cfg.registerer.Register(w); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				return fmt.Errorf("%w: %w", ErrAlreadyRegistered, err)
			}
			return fmt.Errorf("k8sfinalizers: registering the collector: %w", err)
		}
		registered = true
		return nil
	}, func(ctx context.Context) {
		t := w.cfg.clock.NewTicker(w.cfg.checkInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				w.check()
			}
		}
	}, func() error {
		if registered {
			w.cfg.registerer.Unregister(w)
		}
		return nil
	})
}

// NeedLeaderElection reports whether only the elected leader of a manager
// runs the watcher's Start (true unless WithLeaderElection(false)): see
// WithLeaderElection. The informers track on every replica either way.
func (w *Watcher) NeedLeaderElection() bool { return w.cfg.leaderOnly }

// GVKs returns the kinds the watcher watches, in the order given.
func (w *Watcher) GVKs() []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, len(w.kinds))
	for i, ks := range w.kinds {
		out[i] = ks.gvk
	}
	return out
}

// gvkString prints a GroupVersionKind the way kubectl names it:
// "ConfigMap.v1" for the core group, "Deployment.v1.apps" otherwise.
func gvkString(g schema.GroupVersionKind) string {
	if g.Group == "" {
		return g.Kind + "." + g.Version
	}
	return g.Kind + "." + g.Version + "." + g.Group
}
