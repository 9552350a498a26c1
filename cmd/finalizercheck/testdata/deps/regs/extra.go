//go:build regsextra

package regs

import "runtime"

// Extra returns a Conn whose finalizer is set in a file that only builds
// with the regsextra tag.
func Extra() *Conn {
	c := &Conn{}
	runtime.SetFinalizer(c, func(*Conn) { Ran.Add(1) }) // marker: extra
	return c
}
