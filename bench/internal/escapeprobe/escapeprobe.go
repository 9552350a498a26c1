// Package escapeprobe instantiates finalizerwatch's generic registration
// functions with typical argument types. A generic function is compiled,
// and its escape analysis reported, where it is instantiated: building
// this package with -gcflags=-m is how bench's TestRegistrationEscapes
// sees what AddCleanup's body moves to the heap.
package escapeprobe

import "github.com/gcprobe/probe/finalizerwatch"

// Obj is a registered object: 32 bytes with a pointer.
type Obj struct {
	p *int
	a [3]uint64
}

// Handle is a pointer-shaped cleanup argument.
type Handle struct{ fd int }

func closeFD(int)         {}
func closeHandle(*Handle) {}

// AddInt adds a cleanup with an int argument through the package-level
// function.
func AddInt(o *Obj) finalizerwatch.Cleanup {
	return finalizerwatch.AddCleanup(o, closeFD, 3)
}

// AddPointer adds a cleanup with a pointer argument.
func AddPointer(o *Obj, h *Handle) finalizerwatch.Cleanup {
	return finalizerwatch.AddCleanup(o, closeHandle, h)
}

// AddTo adds a cleanup counted in w's ledger.
func AddTo(w *finalizerwatch.Watcher, o *Obj) finalizerwatch.Cleanup {
	return finalizerwatch.AddCleanupTo(w, o, closeFD, 3)
}

// SetFinalizer sets a finalizer through the package-level function.
func SetFinalizer(o *Obj) {
	finalizerwatch.SetFinalizer(o, func(*Obj) {})
}
