// Package pprofexporter writes the finalizerwatch ledger as a pprof
// profile: one sample per ledger entry (per registration stack), located
// at its registration stack, and valued by how many of its registrations
// were registered, executed and are outstanding, how many are suspect
// (outstanding past the watcher's suspect threshold), and by its growth if
// it leaks.
//
//	mux.Handle("/debug/pprof/finalizers", pprofexporter.Handler(finalizerwatch.Default))
//
//	go tool pprof -top -lines http://127.0.0.1:6061/debug/pprof/finalizers   # the leaking lines
//	go tool pprof -top -lines -sample_index=suspect ...                      # every long-lived line
//	go tool pprof -http=:0 ...                                               # flame graph
//
// Or, without HTTP, Write(f, w) writes the same gzipped profile.proto to a
// file, and Profile returns it as a *profile.Profile to inspect or merge.
//
// Sample types, in this order: the summary counters of
// finalizerwatch.Counters, named as it names them (registered/count,
// executed/count, outstanding/count), then suspect/count and growth/count
// (the default). growth is the ranking
// of finalizerwatch's Snapshot.Top: at a site the growth model classes
// growing (its suspects keep reaching new highs), the suspects it gained
// over the model's window; 0 at stable sites (caches, pools) and churn. So
// the default view lists the leaks only, fastest first, and is empty when
// nothing leaks; -sample_index=suspect shows every long-lived site, caches
// included. Every sample carries a label kind
// (finalizer or cleanup). The profile holds code locations and counts,
// nothing else: no object, argument or value of the program.
//
// The registration stack of an entry is the stack of its first
// registration (or, with finalizerwatch.WithFullStacks, the stack the
// entry stands for), innermost first, inlined calls expanded into the
// location's lines.
//
// SampledProfile (served with ?sampled=1) is the other view: the stacks of
// the registrations finalizerwatch samples (one in
// finalizerwatch.DefaultStackSampleRate by default), one sample per
// distinct path into a site, valued by the outstanding and registered
// registrations it stands for. Its values are estimates, the sampled
// counts scaled by the rate, and its comment says so:
//
//	go tool pprof -top -lines 'http://127.0.0.1:6061/debug/pprof/finalizers?sampled=1'
//
// AllocsProfile (served by AllocsHandler, which the probe mounts at
// /debug/pprof/gcprobe-allocs) is the third: the heap profiler's
// (package heapprofile) top allocating and growing sites over its latest
// window, a delta rather than the runtime's since-start totals, with the
// sample types alloc_space/bytes (the default), alloc_objects/count,
// inuse_space/bytes and growth_space/bytes:
//
//	go tool pprof -top http://127.0.0.1:6061/debug/pprof/gcprobe-allocs    # what allocates now
//	go tool pprof -top -sample_index=growth_space ...                      # what keeps growing
//
// All exported functions are safe for concurrent use. Handler builds at
// most MaxConcurrentBuilds profiles at once.
package pprofexporter
