// Package analyzer defines finalizercheck, a go/analysis Analyzer that
// reports calls of runtime.SetFinalizer and runtime.AddCleanup, which the
// finalizerwatch ledger cannot see, and rewrites them into
// finalizerwatch.SetFinalizer and finalizerwatch.AddCleanup.
//
// Command github.com/gcprobe/probe/cmd/finalizercheck runs it on its own:
//
//	go run github.com/gcprobe/probe/cmd/finalizercheck@latest ./...            # report
//	go run github.com/gcprobe/probe/cmd/finalizercheck@latest -fix ./...       # rewrite
//	go run github.com/gcprobe/probe/cmd/finalizercheck@latest -fix -diff ./... # show it
//
// or, installed, under go vet and go fix:
//
//	go install github.com/gcprobe/probe/cmd/finalizercheck@latest
//	go vet -vettool=$(which finalizercheck) ./...
//	go fix -fixtool=$(which finalizercheck) ./...
//
// Import Analyzer to run it with others, in a multichecker or a custom
// driver.
//
// # What it reports and rewrites
//
// References are resolved through type information, so renamed imports
// (rt.SetFinalizer), dot imports, explicit instantiations
// (runtime.AddCleanup[T, S]) and parenthesised functions are found; a
// method or function merely named SetFinalizer is not. Every reference is
// reported. A direct call gets a suggested fix that:
//
//   - replaces runtime.SetFinalizer or runtime.AddCleanup by
//     finalizerwatch.SetFinalizer or finalizerwatch.AddCleanup, keeping any
//     explicit type arguments (the signatures are the same);
//   - imports github.com/gcprobe/probe/finalizerwatch if the file does not
//     already (under another name if "finalizerwatch" is taken where the
//     call is), after the file's last non-standard import or in a group of
//     its own (or, when the file's last import is a lone import "runtime"
//     that the fixes leave unused, in a declaration of its own);
//   - deletes the runtime import when that call was its only use in the
//     file. When several calls were, applying all the fixes (-fix) leaves
//     it unused, and the driver removes it as it formats the file.
//
// No fix is offered, and the message says why, for:
//
//   - function values (f := runtime.SetFinalizer): rewrite them by hand;
//   - runtime.AddCleanup calls whose runtime.Cleanup result is kept as a
//     runtime.Cleanup: assigned to a typed variable or field, returned,
//     passed to a function, put in a composite literal, or stored in a
//     variable used other than to call its Stop method.
//     finalizerwatch.AddCleanup returns a finalizerwatch.Cleanup, so such
//     code needs the declared type changed with the call; the analyzer does
//     not rewrite declarations, which may be exported or shared by
//     unrelated calls. A discarded result, a direct .Stop(), and a variable
//     declared without a type (c := ..., var c = ...) that is only ever
//     stopped are fixed.
//
// Packages of gcprobe itself (import paths under github.com/gcprobe/probe,
// except those with a testdata element) are not checked: finalizerwatch
// wraps the runtime functions and must call them.
//
// After -fix, a module that does not yet require gcprobe needs
// "go get github.com/gcprobe/probe". Rewrite every registration and every
// clearing call (runtime.SetFinalizer(obj, nil)) of a type together: a
// finalizer set through finalizerwatch must be cleared through it too.
package analyzer
