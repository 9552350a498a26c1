// Package versionmoves holds the check that requiring gcprobe moves no
// version of a host program's modules: a library that lives inside other
// programs must require the oldest version of each dependency it needs, or
// the go command raises the host's own choice to gcprobe's.
//
// The check is its test, TestVersionMoves, which scripts/version-moves.sh
// runs (it skips unless GCPROBE_VERSION_MOVES=1). A host (a released
// module and one of its packages, Caddy's by default) is the main module,
// a copy of its module tree; its `go list -m all` is recorded after `go mod
// tidy`; then, in two copies, gcprobe's root package is imported from the
// host's package, and cmd/finalizercheck is added as a tool, both resolved
// from this checkout, and `go mod tidy` runs again. A module whose version
// rises fails the test, unless only modules the host already selected at
// that version require it (their requirements enter the build list once
// gcprobe imports one of their packages), which is reported; a module
// added is listed and counted.
package versionmoves
