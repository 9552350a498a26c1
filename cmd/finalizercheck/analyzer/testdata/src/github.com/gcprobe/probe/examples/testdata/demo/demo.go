// Package demo is under a testdata directory of gcprobe: it is checked.
package demo

import "runtime"

type obj struct{ _ [16]byte }

func Register(o *obj) {
	runtime.SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses the finalizerwatch ledger`
}
