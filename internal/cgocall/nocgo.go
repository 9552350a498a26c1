//go:build !cgo

package cgocall

import "errors"

// Available reports whether this build has cgo: here it has not, and
// Through and OnCThread only call fn.
const Available = false

// Through calls fn; with cgo it calls it from C.
func Through(fn func()) { fn() }

// OnCThread returns an error: without cgo there is no C thread to call fn
// on.
func OnCThread(fn func()) error { return errors.New("cgocall.OnCThread: built without cgo") }
