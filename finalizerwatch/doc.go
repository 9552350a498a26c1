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
//		fmt.Println(s.Site, s.Class, s.Growth, s.Outstanding, s.Suspect)
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
// SuspectCycles (default 3) is a leak suspect.
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
// # What counts as a leak: the growth model
//
// Suspects alone do not make a leak: caches and pools are long-lived too,
// and usually the biggest sites. What a leak does that they do not is
// grow. An entry is observed once in each GC cycle in which it registers
// or is read (Top, Sites, SiteCounts, Stacks, Totals): its suspect count is
// compared with the highest it has had. A site is ClassGrowing when its
// suspects reached a new high in at least GrowthHighs (2) of its last
// GrowthWindow (4) observations, ClassStable when it has suspects but is
// not growing (a cache, a pool, a burst that stopped), and ClassChurn when
// it has none. Top, and every exporter through CompareRank, ranks growing
// sites first by Growth (the suspects gained over the window), then stable
// sites by suspects, then churn.
//
// A leak that registers from the watcher's first cycle on is classed
// growing in cycle SuspectCycles+1 (two new highs: its first registrations
// become suspects in cycle SuspectCycles) and from then on outranks every
// stable site, however slowly it leaks; a cache that fills up is growing
// while it fills and for GrowthWindow-GrowthHighs observations after its
// last new high, then stable (a site that no longer registers is observed
// only when read: with a read every 30 s, that is a minute).
// MoreCyclesNeeded says how many cycles are missing before the classes can
// be trusted (SuspectCycles+GrowthWindow in all).
//
// Registration costs what it did: an atomic load and compare, an atomic
// add; the first registration of an entry in each cycle takes the entry's
// lock (as it already did once the entry was 16 cycles old, to fold
// its age ring) and also sums its suspects (a few tens of nanoseconds,
// once per entry and cycle). The model's state is
// 32 bytes per ledger entry; a read updates it at most once per entry and
// cycle, under the lock the read already takes. Execution is unchanged.
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
