// Package shadow has a local variable named finalizerwatch where a call is
// fixed: the import gets another name.
package shadow

import "runtime"

type obj struct{ _ [16]byte }

func New(finalizerwatch bool) *obj {
	o := &obj{}
	if finalizerwatch {
		runtime.SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses`
	}
	runtime.AddCleanup(o, func(int) {}, 0) // want `runtime\.AddCleanup bypasses`
	return o
}
