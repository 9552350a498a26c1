//go:build gcprobe_runtime

package finalizerwatch

import (
	"sync/atomic"
	"unsafe"
)

// With the gcprobe_runtime build tag the ledger links to the hook table
// that finalizercheck -runtime adds to package runtime (its overlay, which
// the same flags name, adds gcprobe_hooks.go there). A build with the tag
// but without the overlay fails to link, naming runtime.gcprobeHooks: add
// both flags, as finalizercheck -runtime prints them.

//go:linkname rtHookVar runtime.gcprobeHooks
var rtHookVar unsafe.Pointer

//go:linkname rtRuntimeVersion runtime.gcprobeHookVersionVar
var rtRuntimeVersion uintptr

func rtLinked() bool { return true }

// rtVersion is the version of the hook table the patched runtime reads.
func rtVersion() uintptr { return rtRuntimeVersion }

func rtStore(p unsafe.Pointer) { atomic.StorePointer(&rtHookVar, p) }
