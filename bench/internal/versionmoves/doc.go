// Package versionmoves holds the check that requiring gcprobe moves no
// version of a host program's modules: a library that lives inside other
// programs must require the oldest version of each dependency it needs, or
// the go command raises the host's own choice to gcprobe's.
//
// The check is its test, TestVersionMoves, which scripts/version-moves.sh
// runs (it skips unless GCPROBE_VERSION_MOVES=1). A host (a released
// module and one of its packages, Caddy's by default) is required by a
// scratch module; its `go list -m all` is recorded; then, in two fresh
// copies, gcprobe's root package is imported, and cmd/finalizercheck is
// added as a tool, both resolved from this checkout, and `go mod tidy`
// runs. A module whose version rises fails the test; a module added is
// listed and counted.
package versionmoves
