// Package selfuse stands for gcprobe's own packages, which call the
// runtime functions on purpose: nothing here is reported.
package selfuse

import "runtime"

type sentinel struct{ _ [16]byte }

func arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) { arm() })
	runtime.AddCleanup(&sentinel{}, func(int) {}, 0)
}
