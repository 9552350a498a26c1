// Command finalizercheck reports calls of runtime.SetFinalizer and
// runtime.AddCleanup and, with -fix, rewrites them into the
// finalizerwatch calls whose registrations gcprobe can see:
//
//	go run github.com/gcprobe/probe/cmd/finalizercheck@latest ./...
//	go run github.com/gcprobe/probe/cmd/finalizercheck@latest -fix ./...
//
// Installed, it also runs under go vet and go fix:
//
//	go install github.com/gcprobe/probe/cmd/finalizercheck@latest
//	go vet -vettool=$(which finalizercheck) ./...
//	go fix -fixtool=$(which finalizercheck) ./...
//
// Without -fix it exits with status 3 when it reports something, 1 on
// errors, as single-analyzer checkers do. With -fix it applies every fix it
// has, then lists on standard error each call it left as it was (a function
// value, a runtime.Cleanup kept in a typed variable, ...), as file:line and
// the reason, and exits with status 3 if there is one: a script that runs
// -fix does not mistake a partial rewrite for a complete one. -fix -diff
// prints the fixes as a patch instead of applying them, and lists the same. See package
// github.com/gcprobe/probe/cmd/finalizercheck/analyzer for what is reported
// and rewritten.
//
// # Dependencies: -deps
//
// -fix rewrites your own code. A registration inside a dependency (a TLS
// transport cache in client-go, a decoder in a compression library) shows
// only in gcprobe_finalizers_unwatched_total. -deps prepares a build in
// which those too go through finalizerwatch, counted at their own file and
// line, without touching the module cache or your module:
//
//	finalizercheck -deps DIR [-tags list] [packages]
//	go test $(finalizercheck -deps /tmp/fw ./... | tail -1) ./...
//
// It lists the packages (go list -deps -test, with -tags and the
// environment, so GOOS, GOARCH and CGO_ENABLED select the files as the
// build will), type checks the non-standard ones whose files name
// SetFinalizer or AddCleanup, runs the analyzer on them and applies its
// fixes, and writes into DIR:
//
//	DIR/mod/PATH@VERSION/   a copy of each dependency module with a rewritten file
//	DIR/go.mod, DIR/go.sum  the main module's, each such module replaced by its copy
//	DIR/overlay/, DIR/overlay.json  rewritten files of the main module itself
//
// Its last line is the flags to build with, for example
// "-modfile=DIR/go.mod -overlay=DIR/overlay.json" (plus -tags if given, and
// -mod=mod for a vendoring module). The lines before it say which
// registrations are now watched (file:line of the original), which stay
// unwatched and why, which packages were skipped, and which files were
// written or reused.
//
// Why -modfile with replace lines rather than an overlay or vendor/: the go
// command refuses -overlay replacements of files beneath GOMODCACHE, and a
// vendor directory lives in the main module (DIR could not hold it) and
// must list every module, where a replace needs a copy of only the
// modules that change. An overlay is used for the main module, whose
// files are not in the module cache.
//
// Positions are kept: each rewritten file opens with a //line directive
// naming the original file (the module cache path a normal build reports),
// and another follows each import edit that adds or removes lines, so a
// registration is reported at the original file:line. An import of runtime
// that the fixes leave unused becomes import _ "runtime", on its line.
//
// A copy is reused, not written, while the module's files, the rewrites
// and this tool's format are unchanged (DIR/mod/.../.finalizercheck-stamp
// records a hash of them); the same input gives the same bytes.
//
// Limits:
//
//   - The standard library cannot import a module package: its
//     registrations (os.File, network connections, os.Process, crypto/tls,
//     unique) stay unwatched. The README says what the unwatched counters
//     tell about them.
//   - Packages finalizerwatch itself depends on (go list -deps
//     github.com/gcprobe/probe/finalizerwatch) would make an import cycle,
//     and gcprobe's own modules register on purpose: both are skipped, and
//     named in the output.
//   - What the analyzer does not fix stays unwatched, and is listed: a kept
//     runtime.Cleanup result, a function value, a call in a cgo file.
//   - The build must use the environment and tags of the -deps run: files
//     excluded from it are copied unchanged (their registrations
//     unwatched); //go:build ignore files are never rewritten. Run -deps
//     again, into another DIR, for another GOOS/GOARCH or tag set.
//   - The main module must require github.com/gcprobe/probe (the rewritten
//     code imports finalizerwatch at the version the build selects).
//     Workspaces (go.work) are refused, since the go command refuses
//     -modfile in workspace mode: run -deps and the build with GOWORK=off.
//   - A vendoring module builds from the module cache in the prepared build
//     (-mod=mod), and its sites name module cache paths, not vendor/.
//   - Under -trimpath, sites still name the original absolute paths.
//   - A run removes the copies in DIR/mod that it no longer needs, but one
//     DIR holds one prepared build: use another DIR for another
//     configuration, and do not run two -deps into one DIR at once.
package main
