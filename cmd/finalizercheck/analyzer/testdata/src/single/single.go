// Package single has one import declaration without parentheses, and
// still uses runtime after the fix.
package single

import "runtime"

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	runtime.SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses`
	runtime.GC()
	return o
}
