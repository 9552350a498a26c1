// Package pprofexporter writes the finalizerwatch ledger as a pprof
// profile: one sample per ledger entry (per registration stack), located
// at its registration stack, and valued by how many of its registrations
// were registered, executed and are outstanding, how many are suspect
// (outstanding past the watcher's suspect threshold), by its growth if it
// grows, by what it dropped without Close, and by what it leaked.
//
//	mux.Handle("/debug/pprof/finalizers", pprofexporter.Handler(finalizerwatch.Default))
//
//	go tool pprof -top -lines http://127.0.0.1:6061/debug/pprof/finalizers   # the leaking lines
//	go tool pprof -top -lines -sample_index=dropped ...                      # files, connections dropped without Close
//	go tool pprof -top -lines -sample_index=growth ...                       # the growing lines, fastest first
//	go tool pprof -top -lines -sample_index=suspect ...                      # every long-lived line
//	go tool pprof -http=:0 ...                                               # flame graph
//
// Or, without HTTP, Write(f, w) writes the same gzipped profile.proto to a
// file, and Profile returns it as a *profile.Profile to inspect or merge.
//
// Sample types, in this order: the summary counters of
// finalizerwatch.Counters, named as it names them (registered/count,
// executed/count, outstanding/count), then suspect/count, growth/count,
// dropped/count and leaked/count (the default). growth is the ranking
// of finalizerwatch's Snapshot.Top: at a site the growth model classes
// growing (its suspects keep reaching new highs), the suspects it gained
// over the model's window; 0 at stable sites (caches, pools) and churn.
// dropped counts the files, network connections, os.Root and os.Process
// that the site opened and the program dropped without Close, left to
// the garbage collector (runtime build mode only; 0 in any other build):
// such a line is churn to the growth model, since their finalizers run,
// and growth is 0 there.
//
// The default, leaked, is what a line has leaked so far, in objects: the
// suspects of a line classed growing plus what it dropped without Close.
// So the default view lists the leaks of both kinds, largest first, and
// is empty when nothing leaks; a profile whose only leak is a line that
// drops files lists that line. Why not another default: growth alone
// leaves out dropped files, the very leak the runtime build mode finds;
// growth + dropped would add a count over the model's short window to one
// since the program started, so that after some hours of uptime the drops
// hide every growing line (go tool pprof leaves out the lines below 0.5%
// of the total); and a default chosen per profile (growth where a line
// grows, else dropped) would hide the drops whenever anything grows, and
// give two scrapes of one program different views. Suspects and drops
// both count objects since the start. (go tool pprof still leaves out a
// leak smaller than 0.5% of the total, and says "Dropped N nodes": add
// -nodefraction=0 to list every leaking line.) -sample_index=suspect
// shows every long-lived site, caches included. Every sample carries a
// label kind (finalizer or cleanup). The profile holds code locations and
// counts, nothing else: no object, argument or value of the program.
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
// inuse_space/bytes and growth_space/bytes. A sample's stack begins at
// the allocation: the site's path down to it (heapprofile.Site.Path),
// then the site and its callers, so the site's line is the cum column and
// the function that allocated below it the flat one:
//
//	go tool pprof -top -cum http://127.0.0.1:6061/debug/pprof/gcprobe-allocs  # what allocates now
//	go tool pprof -traces ...                                                # from each line down to the allocation
//	go tool pprof -top -sample_index=growth_space ...                        # what keeps growing
//
// # Delta profiles
//
// Both handlers answer ?seconds=N (DeltaParam) as net/http/pprof answers
// it for allocs and heap, and as continuous profilers ask for a custom
// path with delta on (Grafana Alloy's pyroscope.scrape, Parca): the
// profile over the next N seconds, each counter (registered, executed,
// dropped; alloc_space, alloc_objects) what it counted in that time,
// each gauge (outstanding, suspect, growth, leaked; inuse_space,
// growth_space) its value at the end, DurationNanos N seconds.
// AllocsProfilerHandler takes the heap profiler itself for that. N is at
// most MaxDeltaSeconds and below the serving http.Server's WriteTimeout;
// at most MaxConcurrentDeltas wait at once; a delta ends when its
// request's context does. FinalizersPath and AllocsPath are where the
// probe serves the two:
//
//	go tool pprof 'http://127.0.0.1:6061/debug/pprof/finalizers?seconds=10'
//
// All exported functions are safe for concurrent use. Handler builds at
// most MaxConcurrentBuilds profiles at once.
package pprofexporter
