// Package pprofexporter writes the finalizerwatch ledger as a pprof
// profile: one sample per ledger entry (per registration stack), located
// at its registration stack, and valued by how many of its registrations
// are outstanding, suspect (outstanding past the watcher's suspect
// threshold) and registered in all.
//
//	mux.Handle("/debug/pprof/finalizers", pprofexporter.Handler(finalizerwatch.Default))
//
//	go tool pprof -top http://127.0.0.1:6061/debug/pprof/finalizers
//	go tool pprof -sample_index=suspect -top ...
//	go tool pprof -http=:0 ...          # flame graph
//
// Or, without HTTP, Write(f, w) writes the same gzipped profile.proto to a
// file, and Profile returns it as a *profile.Profile to inspect or merge.
//
// Sample types, in this order: outstanding/count (the default),
// suspect/count, registered/count. Every sample carries a label kind
// (finalizer or cleanup). The profile holds code locations and counts,
// nothing else: no object, argument or value of the program.
//
// The registration stack of an entry is the stack of its first
// registration (or, with finalizerwatch.WithFullStacks, the stack the
// entry stands for), innermost first, inlined calls expanded into the
// location's lines.
//
// All exported functions are safe for concurrent use. Handler builds at
// most MaxConcurrentBuilds profiles at once.
package pprofexporter
