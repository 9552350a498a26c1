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
// The probe samples runtime/metrics and the per-cycle GC pause history
// without stopping the world, reads the per-call-site ledger that
// package finalizerwatch keeps for every finalizer and cleanup registered
// through it, and exports both to Prometheus, to a pprof profile and, when
// asked, to OpenTelemetry.
package probe
