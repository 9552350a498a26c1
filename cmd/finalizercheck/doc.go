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
package main
