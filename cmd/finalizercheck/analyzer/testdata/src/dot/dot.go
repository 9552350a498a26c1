// Package dot imports runtime with a dot, for one call.
package dot

import . "runtime"

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses`
	return o
}
