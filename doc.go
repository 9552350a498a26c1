// Package probe shows why a Go program's GC pauses grow and which line of
// its code leaks finalizers and cleanups.
//
// One line starts everything with safe defaults:
//
//	p, err := probe.Start()
//	if err != nil {
//		return err
//	}
//	defer p.Stop()
//
// and finalizers and cleanups registered through package finalizerwatch
// (drop-ins for runtime.SetFinalizer and runtime.AddCleanup) are counted at
// their call sites.
//
// # What runs
//
// A probe owns a memstats.Sampler, which reads runtime/metrics and the
// per-cycle pause history (neither stops the world) once a second and after
// every GC cycle, and a Prometheus collector over the sampler and the
// finalizerwatch ledger, registered on prometheus.DefaultRegisterer (or
// WithRegisterer). ProfileHandler serves the outstanding registrations as a
// pprof profile; Report returns the whole picture for logs and tests. With
// WithListenAddr the probe serves /metrics and /debug/pprof/finalizers
// itself.
//
// Defaults: no runtime.ReadMemStats (it stops the world; WithReadMemStats),
// no listener of its own, the global OpenTelemetry tracer provider, the top
// 10 sites per kind exported by name.
//
// # In a controller-runtime operator
//
// New plus (*Probe).Start(ctx) make a manager.Runnable, without this package
// importing controller-runtime:
//
//	p, err := probe.New(probe.WithRegisterer(metrics.Registry))
//	...
//	mgr.Add(p)
//
// and ProfileHandler goes into the metrics server's ExtraHandlers. The
// probe needs no leader election: every replica has its own heap.
//
// # Safety
//
// The probe never panics into its host: bad options are errors from New
// and Start, a second probe on one registerer gets ErrAlreadyRegistered,
// and a panic inside its own goroutines is recovered, counted (Panics) and
// logged once through WithLogger. Stop ends every goroutine it started.
// The listener of WithListenAddr is unauthenticated: it serves two paths,
// GET and HEAD only, with timeouts, at most MaxListenerConns connections at
// once and closes idle ones after ListenerIdleTimeout; bind it to loopback. The profile and the
// site labels reveal function names, file paths and line numbers of the
// program, never data.
//
// All exported functions and methods are safe for concurrent use.
package probe
