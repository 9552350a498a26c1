// Package regs registers finalizers and cleanups with the runtime, as a
// dependency of the module under test would.
package regs

import (
	"runtime"
	"sync/atomic"
)

// Ran counts the finalizers and cleanups of this package that ran.
var Ran atomic.Int64

// Conn is closed by its finalizer.
type Conn struct{ fd [4]int }

// Dial returns a Conn whose finalizer closes it.
func Dial() *Conn {
	c := &Conn{fd: [4]int{1}}
	runtime.SetFinalizer(c, func(c *Conn) { Ran.Add(1) }) // marker: dial
	return c
}

// Box holds a value of any type; a cleanup counts its release.
type Box[T any] struct {
	V   T
	pad [4]int
}

// NewBox returns a Box holding v.
func NewBox[T any](v T) *Box[T] {
	b := &Box[T]{V: v}
	runtime.AddCleanup(b, func(n int) { Ran.Add(int64(n)) }, 1) // marker: box
	return b
}

// CPUs keeps a use of runtime beside the registrations, so the import
// stays and the rewrite adds one for finalizerwatch.
func CPUs() int { return runtime.NumCPU() }
