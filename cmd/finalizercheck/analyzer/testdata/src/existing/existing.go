// Package existing already imports finalizerwatch under another name.
package existing

import (
	"runtime"

	fw "github.com/gcprobe/probe/finalizerwatch"
)

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	runtime.SetFinalizer(o, func(*obj) {}) // want `runtime\.SetFinalizer bypasses`
	return o
}

func Sites() int { return len(fw.Default.Sites()) }
