// Package cleanups uses the runtime.Cleanup results of AddCleanup in
// every way: only those that stay valid as a finalizerwatch.Cleanup are
// fixed.
package cleanups

import "runtime"

type res struct {
	fd int
	_  [24]byte
}

type owner struct{ c runtime.Cleanup }

func release(fd int) {}

func keep(runtime.Cleanup) {}

func Discarded(r *res) {
	runtime.AddCleanup(r, release, r.fd) // want `^runtime\.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch\.AddCleanup$`
}

func Stopped(r *res) {
	c := runtime.AddCleanup(r, release, r.fd) // want `^runtime\.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch\.AddCleanup$`
	defer func() { c.Stop() }()
	var d = (runtime.AddCleanup(r, release, r.fd)) // want `^runtime\.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch\.AddCleanup$`
	d.Stop()
	_ = runtime.AddCleanup(r, release, r.fd) // want `^runtime\.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch\.AddCleanup$`
}

func Typed(r *res) {
	var c runtime.Cleanup = runtime.AddCleanup(r, release, r.fd) // want `no automatic fix: its result initializes c, declared runtime\.Cleanup; finalizerwatch\.AddCleanup returns a finalizerwatch\.Cleanup, so change that type along with the call\)$`
	c.Stop()
}

func Field(r *res, o *owner) {
	o.c = runtime.AddCleanup(r, release, r.fd) // want `no automatic fix: its result is assigned to o\.c, a runtime\.Cleanup;`
}

func Returned(r *res) runtime.Cleanup {
	return runtime.AddCleanup(r, release, r.fd) // want `no automatic fix: its result is returned as a runtime\.Cleanup;`
}

func Passed(r *res) {
	keep(runtime.AddCleanup(r, release, r.fd)) // want `no automatic fix: its result is passed to keep as a runtime\.Cleanup;`
}

func Literal(r *res) owner {
	return owner{c: runtime.AddCleanup(r, release, r.fd)} // want `no automatic fix: its result is used as a runtime\.Cleanup;`
}

func Escapes(r *res) {
	c := runtime.AddCleanup(r, release, r.fd) // want `no automatic fix: its result is stored in c, which is used other than to call c\.Stop;`
	keep(c)
}

func Reassigned(r *res) {
	c := runtime.AddCleanup(r, release, r.fd) // want `no automatic fix: its result is stored in c, which`
	c = runtime.AddCleanup(r, release, r.fd)  // want `no automatic fix: its result is assigned to c, a runtime\.Cleanup;`
	c.Stop()
}
