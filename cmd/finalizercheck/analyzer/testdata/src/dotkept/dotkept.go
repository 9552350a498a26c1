// Package dotkept imports runtime with a dot and uses it for more.
package dotkept

import . "runtime"

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	AddCleanup[obj](o, func(int) {}, 1) // want `runtime\.AddCleanup bypasses`
	GC()
	return o
}
