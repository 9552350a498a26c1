//go:build gcprobe_runtime

package finalizerwatch

import (
	"sync/atomic"
	"unsafe"
)

// With the gcprobe_runtime build tag the ledger links to the hook table
// that finalizercheck -runtime adds to package runtime (its overlay, which
// the same flags name, adds gcprobe_hooks.go there).
//
// A build with the tag whose runtime is not the patched one (the tag
// without the overlay; or the overlay that finalizercheck wrote for one
// toolchain, used by another, as GOTOOLCHAIN or a go.mod toolchain line
// selects it: the overlay names the first toolchain's files, which the
// second does not build) fails to link:
//
//	relocation target runtime.gcprobePatchedRuntime not defined
//
// rather than claim a mode that counts nothing. The function has no body
// here (rtlink_on.s lets the package declare one): only the patched
// runtime defines it. Build with both flags, as finalizercheck -runtime
// prints them, and with the go that ran it.

//go:linkname rtHookVar runtime.gcprobeHooks
var rtHookVar unsafe.Pointer

//go:linkname rtPatchedRuntime runtime.gcprobePatchedRuntime
func rtPatchedRuntime() uintptr

func rtLinked() bool { return true }

// rtVersion is the version of the hook table the patched runtime reads.
func rtVersion() uintptr { return rtPatchedRuntime() }

func rtStore(p unsafe.Pointer) { atomic.StorePointer(&rtHookVar, p) }

// rtGoroutineOrigin is the calling goroutine's origin (rtorigin.go), as
// its go statement recorded it, or 0.
//
//go:linkname rtGoroutineOrigin runtime.gcprobeGoroutineOrigin
func rtGoroutineOrigin() uintptr

// rtInRuntime reports whether the function at return PC pc is package
// runtime's; it does not allocate.
//
//go:linkname rtInRuntime runtime.gcprobeInRuntime
func rtInRuntime(pc uintptr) bool

// rtFlushCounts moves the counts in every P's table into buf (the
// runtime's gcprobeFlushCounts; rtpcounts.go): how many it wrote, or
// -need if buf is too short.
//
//go:linkname rtFlushCounts runtime.gcprobeFlushCounts
func rtFlushCounts(buf []rtCount) int
