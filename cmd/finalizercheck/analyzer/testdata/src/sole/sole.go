// Package sole uses runtime for one call only: the fix swaps the imports.
package sole

import (
	"os"
	"runtime"
)

type tmp struct {
	f *os.File
	_ [16]byte
}

func Track(t *tmp) {
	runtime.SetFinalizer(t, func(t *tmp) { os.Remove(t.f.Name()) }) // want `runtime\.SetFinalizer bypasses`
}
