//go:build cgo

// Package cgocall calls Go code back from C, for tests of what crosses a
// cgo callback: stack capture and registration from a callback. It is
// built only with cgo; without it (no C compiler found, or
// CGO_ENABLED=0), Available is false and the tests that need it skip.
package cgocall

/*
#cgo LDFLAGS: -lpthread
#include <stdint.h>

void gcprobeCallBack(uintptr_t h);
int gcprobeCallBackOnThread(uintptr_t h);
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
)

// Available reports whether this build has cgo: whether Through and
// OnCThread call through C.
const Available = true

// Through calls fn from C: Go calls a C function, which calls back into
// Go, which calls fn, on the calling goroutine.
func Through(fn func()) {
	h := cgo.NewHandle(fn)
	defer h.Delete()
	C.gcprobeCallBack(C.uintptr_t(h))
}

// OnCThread calls fn on a thread that C created (pthread_create), which
// the runtime has never seen before the callback, and waits for it to
// return.
func OnCThread(fn func()) error {
	h := cgo.NewHandle(fn)
	defer h.Delete()
	if rc := C.gcprobeCallBackOnThread(C.uintptr_t(h)); rc != 0 {
		return fmt.Errorf("cgocall.OnCThread: pthread_create or pthread_join failed: %d", int(rc))
	}
	return nil
}

//export gcprobeGoCallback
func gcprobeGoCallback(h C.uintptr_t) {
	cgo.Handle(h).Value().(func())()
}
