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
// pprof profile; PageHandler serves the live page (PagePath,
// /debug/gcprobe/: the top sites, queues, pauses and detectors per GC cycle,
// from a history the probe keeps, and its JSON document PageData); Report
// returns the whole picture for logs and tests. With WithListenAddr the
// probe serves /metrics, /debug/pprof/finalizers and the live page itself.
//
// Once per GC cycle the probe reads the ledger's top sites, and logs at
// Warn (through WithLogger, else slog's default logger) a line when a site
// turns growing, a likely leak, and one when it stops, naming the site and
// the evidence ("+433 suspects over 4 cycles"): once per transition, at
// most one line per GrowingLogEvery per site.
//
// Defaults: no runtime.ReadMemStats (it stops the world; WithReadMemStats),
// no listener of its own, the global OpenTelemetry tracer provider, the top
// 10 sites (of either kind) exported by name.
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
// and ProfileHandler and PageHandler go into the metrics server's
// ExtraHandlers, behind its authentication. (*Probe).Start(ctx) blocks
// until ctx ends; the package-level Start returns at once. The
// probe needs no leader election: every replica has its own heap.
//
// # Safety
//
// The probe never panics into its host: bad options are errors from New
// and Start, a second probe on one registerer gets ErrAlreadyRegistered,
// and a panic inside its own goroutines is recovered, counted (Panics) and
// logged once through WithLogger. Stop ends every goroutine it started.
// The listener of WithListenAddr is unauthenticated: it serves a few paths,
// GET and HEAD only, with timeouts, at most MaxListenerConns connections at
// once and closes idle ones after ListenerIdleTimeout; bind it to loopback. The profile and the
// site labels reveal function names, file paths and line numbers of the
// program, never data.
//
// All exported functions and methods are safe for concurrent use.
package probe
