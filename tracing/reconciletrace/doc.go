// Package reconciletrace wraps a controller-runtime reconciler so that each
// reconcile's span carries the garbage collection that overlapped it: the
// GC cycles that completed, their stop-the-world pauses, and the heap the
// process allocated meanwhile, next to the reconcile's result or error. A
// reconcile that is slow because the collector stopped the world, or that
// allocates heavily enough to drive GC, shows it in its trace.
//
// It is a package of its own because it imports controller-runtime; the
// rest of gcprobe does not.
//
// # Usage
//
//	s, err := memstats.New()
//	...
//	if err := mgr.Add(manager.RunnableFunc(s.Run)); err != nil { ... }
//	r, err := reconciletrace.Wrap(&MyReconciler{Client: mgr.GetClient()}, s,
//		reconciletrace.WithControllerName("widget"))
//	if err != nil {
//		return err
//	}
//	return ctrl.NewControllerManagedBy(mgr).For(&v1.Widget{}).Complete(r)
//
// WrapTyped does the same for a reconcile.TypedReconciler of any request
// type.
//
// # The span
//
// If the context already carries a recording span (an outer tracing
// wrapper started one), the wrapper adds its attributes to that span and
// leaves ending it to its owner; otherwise, or with WithNewSpan, it starts a
// span named "reconcile" (WithSpanName), of kind Internal, from the
// tracer named ScopeName, and ends it when the reconcile returns. A sampled
// out span costs nothing more.
//
//	gcprobe.controller.name            WithControllerName's name, if set
//	k8s.namespace.name                 the request's namespace (reconcile.Request, if not empty)
//	gcprobe.reconcile.name             the request's name (reconcile.Request)
//	gcprobe.reconcile.request          the request's String (other request types that have one)
//	gcprobe.gc.cycles                  GC cycles completed during the reconcile
//	gcprobe.gc.pauses                  of their pauses, those that overlapped the reconcile
//	gcprobe.gc.pause_total_ns          their total stop-the-world time (int64 ns)
//	gcprobe.gc.pause_max_ns            the longest of them (int64 ns)
//	gcprobe.heap.allocated_bytes       bytes the whole process allocated on the heap meanwhile
//	gcprobe.reconcile.requeue          the Result asks for a requeue (Requeue or RequeueAfter > 0)
//	gcprobe.reconcile.requeue_after_ns Result.RequeueAfter (int64 ns)
//	gcprobe.reconcile.terminal_error   on error: whether it is a reconcile.TerminalError
//	gcprobe.reconcile.panic            true when the reconciler panicked
//	gcprobe.gc.alloc_sites             with WithHeapProfile and a GC cycle during the reconcile: the heap
//	                                   profile's top 3 allocating sites, "function file:line (N B/s)"
//	gcprobe.gc.alloc_sites_window_ns   the heap profile window they cover (int64 ns)
//	gcprobe.gc.causes                  with WithCauses and a GC cycle during the reconcile: the causes of GC
//	                                   work named then (the probe's GCCauseNames), e.g. ["allocation_driven"]
//
// With WithHeapProfile, each of those sites is also a gcprobe.alloc_site
// event (EventAllocSite) with code.function, code.filepath, code.lineno,
// gcprobe.alloc.bytes_per_second and gcprobe.alloc.bytes.
//
// An error sets the span's status to Error with the error's text and
// records it as an exception event (RecordError). A panic does the same,
// with the stack, and then panics on with the same value, for
// controller-runtime's own recovery.
//
// # What is measured, and what it costs
//
// Cycles and allocation come from runtime/metrics (/gc/cycles/total:gc-cycles
// and /gc/heap/allocs:bytes), read with one metrics.Read at the start and
// one at the end into pooled sample slices: no allocation, no lock, no
// stop of the world. Both are process-wide: the allocated bytes are what
// every goroutine allocated while this reconcile ran, not what this
// reconcile allocated, and with concurrent reconciles
// (MaxConcurrentReconciles) they overlap. The runtime counts small
// allocations when a per-P cache is flushed, so the figure may lag by a
// few spans' worth; large objects count at once.
//
// Pauses are looked up only when a cycle completed during the reconcile:
// first in the sampler's pause history (memstats.Sampler.PausesSince,
// cycles after the one current at the start), keeping the pauses whose
// time overlaps the reconcile's; the sampler learns of a cycle a moment
// after it ends, so cycles it has not ingested yet (or all of them, when
// the sampler is nil) are read from the runtime's own history with
// debug.ReadGCStats, which takes the heap lock briefly but does not stop
// the world. A cycle older than the runtime's 256-cycle history counts in
// gcprobe.gc.cycles but not in the pauses.
//
// # Concurrency
//
// The wrapped reconciler is safe for concurrent use if the reconciler it
// wraps is: it keeps no state across reconciles.
package reconciletrace
