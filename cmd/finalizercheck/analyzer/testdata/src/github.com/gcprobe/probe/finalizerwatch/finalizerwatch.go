// Package finalizerwatch is a stub of the real package with the same
// signatures, for type-checking the analyzer's test packages. Its own
// runtime calls must not be reported.
package finalizerwatch

import "runtime"

// Cleanup is a handle to a cleanup registered with AddCleanup.
type Cleanup struct{ c runtime.Cleanup }

// Stop cancels the cleanup call.
func (c Cleanup) Stop() { c.c.Stop() }

// Watcher keeps a ledger.
type Watcher struct{}

// Default is the package-level Watcher.
var Default = &Watcher{}

// Sites returns the ledger's call sites.
func (w *Watcher) Sites() []string { return nil }

// SetFinalizer is runtime.SetFinalizer, counted.
func SetFinalizer(obj any, finalizer any) { runtime.SetFinalizer(obj, finalizer) }

// AddCleanup is runtime.AddCleanup, counted.
func AddCleanup[T, S any](ptr *T, cleanup func(S), arg S) Cleanup {
	return Cleanup{runtime.AddCleanup(ptr, cleanup, arg)}
}
