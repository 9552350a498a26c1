// Package lone imports only runtime, for one call.
package lone

import "runtime"

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	runtime.SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses`
	return o
}
