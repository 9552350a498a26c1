package main_test

import (
	"runtime"
	"testing"
)

// An external test package registers too: in a -deps build its files go
// through the overlay like the main package's.
func TestRegisters(t *testing.T) {
	runtime.SetFinalizer(new([8]byte), func(*[8]byte) {}) // marker: xtest
}
