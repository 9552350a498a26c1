//go:build !gcprobe_runtime

package finalizerwatch

import "unsafe"

// Without the gcprobe_runtime build tag (which the flags finalizercheck
// -runtime prints set, beside the overlay that patches the runtime) the
// ledger is not linked to the runtime's hooks: RuntimeMode is false.

func rtLinked() bool { return false }

func rtVersion() uintptr { return 0 }

func rtStore(unsafe.Pointer) {}

func rtGoroutineOrigin() uintptr { return 0 }

func rtInRuntime(uintptr) bool { return false }

func rtFlushCounts([]rtCount) int { return 0 }
