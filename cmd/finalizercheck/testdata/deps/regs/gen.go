//go:build ignore

// A generator, never part of a build: left as it is.
package main

import "runtime"

func main() {
	x := new(int)
	runtime.SetFinalizer(x, func(*int) {})
}
