package regs

import "runtime"

// Keep returns the runtime.Cleanup it registers: the rewrite cannot
// change its type, so this registration stays unwatched.
func Keep(b *Box[int]) runtime.Cleanup {
	return runtime.AddCleanup(b, func(int) {}, 0) // marker: kept
}
