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
//	var sn finalizerwatch.Snapshot
//	finalizerwatch.Default.Read(&sn, finalizerwatch.ReadOptions{TopK: 5, Stacks: true})
//	for _, s := range sn.Top {
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
// costs a few nanoseconds. A call through a method value or reflection is
// counted at the user's line too: the wrapper frames in between are
// recognised once per return PC and skipped with runtime.Callers. The full
// registration stack is captured once per site, and for one registration
// in StackSampleRate (default 512), at random, which is counted under its
// stack too (StackSamples; like the heap profile, an estimate scaled by
// the rate); with WithFullStacks, on every registration, by walking frame
// pointers (stackcapture.Callers). A registration's age
// is the number of GC cycles it has survived, counted by a sentinel
// finalizer (and a sentinel cleanup, for cleanups) that re-arms itself after
// each cycle: a cycle counts once the goroutine that runs that kind of
// callback has caught up with it, so a backed-up queue does not make
// healthy objects look old. An outstanding registration older than
// SuspectCycles (default 3) is a leak suspect.
//
// The watcher holds no reference to a registered object: for finalizers it
// keeps a record in a table keyed by the object's address, with the user's
// finalizer where that is a function (a closure on the heap is held by the
// runtime instead, in a closure of the watcher's: one allocation, so that a
// direct clear lets go of it as it would without the watcher), and for
// cleanups one record that the runtime passes to the cleanup. Running a finalizer or
// cleanup through the watcher adds a table deletion (finalizers only), a
// clock read (two for the one run in DurationSampleRate that is timed) and
// a few atomic operations. The watcher keeps no goroutine of its own (see
// Watcher).
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
// or is ranked (see Read): its suspect count is
// compared with the highest it has had and with the previous
// observation's. A site is ClassGrowing when its suspects reached a new
// high in at least GrowthHighs (2) of its last GrowthWindow (4)
// observations, or rose, by at least one, in each of its last GrowthRun
// (8) observations, however far below an earlier high; ClassStable when it
// has suspects but is not growing (a cache, a pool, a burst that stopped);
// and ClassChurn when it has none. The ranking (Snapshot.Top, and every
// exporter through it) puts growing sites first by Growth (the suspects gained
// over the window: in new highs, or in every rise while the run lasts),
// then stable sites by suspects, then churn.
//
// A leak that registers from the watcher's first cycle on is classed
// growing in cycle SuspectCycles+1 (two new highs: its first registrations
// become suspects in cycle SuspectCycles) and from then on outranks every
// stable site, however slowly it leaks. A leak whose count first fell
// below an earlier high (a start-up batch released at the same site, a
// cache emptied, while the leak goes on) is classed growing once it has
// risen for GrowthRun observations, and from then on likewise, long before
// it beats that high. A cache that fills up is growing while it fills and
// for GrowthWindow-GrowthHighs observations after its last new high, then
// stable, however its count wavers below that high, unless it rises
// GrowthRun times in a row (a site that no longer registers is observed
// only when read: with a read every 30 s, that is a minute).
// Snapshot.MoreCyclesNeeded says how many cycles are missing before the
// classes can be trusted (SuspectCycles+GrowthWindow in all).
//
// # Judged in time: WithSuspectAge
//
// Counted in GC cycles alone, "three cycles old" is 60 ms on a server that
// runs fifty cycles a second: a pool warming up or files opened at
// start-up and kept look like a leak within a second, and the model's
// windows are too short to see a slow leak on a busy server as what it
// is. WithSuspectAge(A) (the probe's default is 30 s; here it is off, for
// tests that force GC cycles to find a leak) judges the ledger in wall
// time as well: its cycles are GC cycles taken together so that each
// lasts at least A/6, an outstanding registration is a suspect once it
// has survived SuspectCycles of them and A, and new highs class a site
// growing only once they have gone on for A. A pool that fills within A,
// files opened at start-up, a cache filled once are never growing; a
// leak of one object every two seconds is growing about 2A after it
// starts (65 s with A = 30 s, at 10 or 50 GC cycles a second:
// TestGrowthJudgedInTime). On a program that runs one GC cycle a minute
// nothing changes. Snapshot.MoreTimeNeeded says how much longer the
// watcher must run before anything can be a suspect.
//
// A registration costs one atomic add to its entry's counter of the
// current cycle, a clear or a run one more to the entry's ends of that
// cycle; the first registration of an entry in each cycle takes the entry's
// lock (to fold its ring of 16 cycles) and also sums its suspects (a few
// tens of nanoseconds, once per entry and cycle). The model's state is 32
// bytes per ledger entry; a read updates it at most once per entry and
// cycle, under the lock the read already takes. Execution is unchanged.
//
// # Reading the ledger
//
// Everything that reads the ledger reads it through one call: Read fills
// a Snapshot with the top K sites of either kind by the growth model (one
// meaning of K for every consumer), per kind every other site summed under
// Other and the totals, the overflow counters, the callbacks running now,
// the GC cycles counted and how many more the model needs, and on request
// every entry (for a profile of every stack) or the sampled stacks. The
// Snapshot's doc lists which consumer reads what. The ranking is made once
// per GC cycle in two passes over every entry, O(ledger): by
// RankEachCycle when the cycle ends, on a goroutine of the caller's (the
// probe runs one), or by Rank; failing those, by the first Read of the
// cycle, or the first after the ledger gains an entry. Any other Read
// costs O(K): live, the top sites' registered, executed, cleared and
// outstanding counts and run times (over at most 8 entries per site, the
// others as of the ranking) and the overflow counters; as of the ranking,
// the order, the top sites' ages, suspects, class and growth, and
// everything under Other. ReadOptions.Fresh ranks anew for exact counts
// everywhere; with TopK -1 it lists every site (what a test reads).
//
// # Which line forces GC cycles (the runtime build mode)
//
// In a binary built with the flags finalizercheck -runtime prints, a
// Watcher attached to the runtime (AttachRuntime; the probe attaches its
// own) also counts every call of runtime.GC and debug.FreeOSMemory at its
// calling line: ForcedGCSites lists them, most calls first, and
// RuntimeModeForcedGC reports whether they are being counted. Outside the
// mode ForcedGCSites returns nothing.
//
// # Differences from the runtime
//
// What runs, how often and in which order is the runtime's: the watcher's
// own finalizer and cleanup call the user's, once, on the runtime's
// goroutines, and a side-by-side test runs the same scenarios (resurrection,
// re-arming, clears and Stops from either side, address reuse, zero-size
// objects and fields, tiny objects, reference cycles, bad arguments)
// through both and compares them. The differences, all deliberate:
//
//   - Argument errors that the runtime reports with an unrecoverable fatal
//     error (SetFinalizer with a nil, non-pointer or mistyped argument)
//     panic instead, with a message naming the function and the problem.
//     Three remain fatal because the runtime finds them first: obj pointing
//     into the middle of an allocation, obj pointing to memory that is not
//     from the Go heap (allocated by C or mapped by the program: "pointer
//     not in allocated block"; a global or a zero-size object is ignored,
//     as by the runtime), and a finalizer set on an object that has one,
//     whether through finalizerwatch or directly ("finalizer already set":
//     the runtime's answer, so no finalizer the user set is discarded).
//   - A finalizer set through finalizerwatch and cleared with
//     runtime.SetFinalizer directly counts as outstanding until its address
//     is registered again (then as cleared, and as SiteStats.ClearedOutside,
//     as is one whose address was reused by a new object): clear through
//     finalizerwatch, as finalizercheck -fix rewrites it to. Its table
//     entry keeps nothing of the user's alive: a finalizer that is a
//     closure on the heap is held by the runtime, which lets go of it at
//     the direct clear.
//   - AddCleanup makes the runtime's own checks of its arguments (arg equal
//     to or inside ptr's allocation, a cleanup that closes over ptr) by
//     registering the user's cleanup with the runtime once and stopping it:
//     on the first registration at each call site, and on every one with
//     GODEBUG=checkfinalizers=1. A site whose later registrations differ
//     from its first in that respect is checked only where arg points into
//     *ptr itself.
//   - A finalizer set on a global variable, which the runtime silently
//     ignores, counts as outstanding; AddCleanup detects that case.
//   - GODEBUG=checkfinalizers=1 names, for a cleanup registered through
//     finalizerwatch, finalizerwatch's frames (addCleanup where it was
//     created, runCleanup as its function) rather than the user's: the
//     runtime records its own caller. The ledger's site for the object's
//     type is the user's line. For finalizers the runtime's check cannot
//     see the user's closure at all (the watcher holds it), so in that mode
//     SetFinalizer checks at registration that the finalizer does not close
//     over obj, and panics if it does; deeper paths back to obj are shown by
//     the ledger, as outstanding suspects, instead.
//
// All exported functions and methods are safe for concurrent use.
package finalizerwatch
