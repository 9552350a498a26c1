// Package finalizerwatch is a drop-in for runtime.SetFinalizer and
// runtime.AddCleanup that keeps a ledger per call site: what was
// registered, executed and cleared, what is still outstanding and how many
// GC cycles it has survived, and how long the finalizers took. From that
// it ranks the call sites most likely to leak.
//
// Replace the runtime calls, nothing else changes:
//
//	finalizerwatch.SetFinalizer(f, (*File).close)       // was runtime.SetFinalizer
//	c := finalizerwatch.AddCleanup(b, release, b.handle) // was runtime.AddCleanup
//	...
//	for _, s := range finalizerwatch.Default.Top(5) {
//		fmt.Println(s.Site, s.Outstanding, s.Suspect)
//	}
//
// The package-level functions count into Default; tests and programs that
// want a ledger of their own make a Watcher with New and call its methods
// (AddCleanupTo for cleanups, since methods cannot be generic).
//
// # What is counted, and what it costs
//
// Every registration is counted exactly at its call site: the first frame
// outside the runtime and gcprobe, found with a frame-pointer walk that
// costs a few nanoseconds. The full registration stack is captured once per
// site (or on every registration, with WithFullStacks). A registration's age
// is the number of GC cycles it has survived, counted by a sentinel
// finalizer (and a sentinel cleanup, for cleanups) that re-arms itself after
// each cycle: a cycle counts once the goroutine that runs that kind of
// callback has caught up with it, so a backed-up queue does not make
// healthy objects look old. An outstanding registration older than
// SuspectCycles (default 3) is a leak suspect; Top ranks sites by the leak
// score documented there.
//
// The watcher holds no reference to a registered object: for finalizers it
// keeps the user's finalizer in a table keyed by the object's address (the
// runtime would hold the finalizer just the same), and for cleanups one
// record that the runtime passes to the cleanup. Running a finalizer or
// cleanup through the watcher adds a table deletion (finalizers only), two
// clock reads and a few atomic operations. The watcher starts no goroutine.
//
// Every table is bounded: sites (WithMaxSites), stacks (WithMaxStacks),
// and the address table, which holds one entry per object whose finalizer
// is set, as the runtime itself does. Past a bound, registrations are still
// counted, under an overflow site.
//
// # Differences from the runtime
//
// Argument errors that the runtime reports with an unrecoverable fatal
// error panic here instead, with a message naming the function and the
// problem. A finalizer set on a global variable (which the runtime silently
// ignores) is counted as outstanding forever; AddCleanup detects that case.
//
// All exported functions and methods are safe for concurrent use.
package finalizerwatch
