// Package finalizertest fails tests that leak finalizers or cleanups, the
// way go.uber.org/goleak fails tests that leak goroutines.
//
// It reads the per-call-site ledger of package finalizerwatch, so it sees
// registrations made through finalizerwatch.SetFinalizer and
// finalizerwatch.AddCleanup (cmd/finalizercheck rewrites direct runtime
// calls into those), not those made with the runtime functions directly.
//
//	func TestPool(t *testing.T) {
//		defer finalizertest.VerifyNone(t, finalizertest.IgnoreCurrent())
//		...
//	}
//
// or, once for a whole package:
//
//	func TestMain(m *testing.M) {
//		finalizertest.VerifyTestMain(m)
//	}
//
// A failure names each leaking call site as "function file:line" with its
// registered and outstanding counts, how many GC cycles its registrations
// survived, whether its leak is still growing while Find forces cycles
// (finalizerwatch's growth model; growing sites are listed first) or is
// stable, and the stack of its registration:
//
//	finalizertest: 10 leaked registration(s) at 1 call site(s), still outstanding after 3 forced GC cycles:
//
//	finalizer example.com/pool.(*Pool).grow /src/pool/pool.go:42
//		registered 12, outstanding 10, leaked 10
//		survived: 10 for 3 cycles
//		stable: long-lived, not growing
//		registration stack:
//			example.com/pool.(*Pool).grow
//				/src/pool/pool.go:42
//			...
//
// # What counts as a leak
//
// Find (behind VerifyNone and VerifyTestMain) forces GC cycles and waits,
// polling runtime/metrics with a deadline, until the finalizers and
// cleanups queued by each cycle have run. A registration still outstanding
// once the watcher's GC clock has counted WithCycles cycles (default
// DefaultCycles) since Find began is leaked: its object is still reachable,
// from a global, a goroutine, or its own finalizer or cleanup. If nothing
// is outstanding Find returns at once, without forcing any GC.
//
// # Which registrations: baselines
//
// The ledger does not know which test made a registration, only where and
// how long ago. Without a baseline Find reports every leaked registration
// in the ledger, including those of earlier tests and of package
// initialisation (a cache filled in init that legitimately lives forever,
// say). IgnoreCurrent, evaluated when the defer statement runs at the top
// of a test, snapshots the outstanding count of every site so that only a
// site's excess over it is reported; IgnoreSite and IgnoreFunction drop
// known long-lived sites altogether. VerifyTestMain checks after all tests
// have run, when everything the tests made should be gone.
//
// # Parallel tests
//
// Registrations made by tests running in parallel (t.Parallel) are
// indistinguishable from the current test's: a leak in one parallel test
// fails whichever of them verifies, and a baseline taken while another
// test holds objects can hide or blame the wrong test. For packages with
// parallel tests, check once with VerifyTestMain, or keep the tests that
// VerifyNone checks out of parallel runs. Tests that make their own
// finalizerwatch.Watcher (finalizerwatch.New) and check it with WithWatcher
// have a ledger of their own and none of these problems.
//
// Find starts no goroutine. All exported functions are safe for concurrent
// use.
package finalizertest
