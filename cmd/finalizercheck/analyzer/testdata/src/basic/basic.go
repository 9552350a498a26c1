package basic

import (
	"fmt"
	"runtime"
)

type file struct {
	fd  int
	buf [32]byte
}

func (f *file) close() { fmt.Println("close", f.fd) }

func Open(fd int) *file {
	f := &file{fd: fd}
	runtime.SetFinalizer(f, (*file).close) // want `^runtime\.SetFinalizer bypasses the finalizerwatch ledger: use finalizerwatch\.SetFinalizer$`
	return f
}

func Close(f *file) {
	runtime.SetFinalizer(f, nil) // want `runtime\.SetFinalizer bypasses`
	f.close()
}

type buffer struct {
	handle int
	_      [16]byte
}

func release(h int) {}

func NewBuffer(h int) *buffer {
	b := &buffer{handle: h}
	runtime.AddCleanup(b, release, h) // want `^runtime\.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch\.AddCleanup$`
	return b
}

func Stopped(h int) {
	b := &buffer{handle: h}
	runtime.AddCleanup(b, release, h).Stop()       // want `runtime\.AddCleanup bypasses`
	defer runtime.AddCleanup(b, release, h).Stop() // want `runtime\.AddCleanup bypasses`
	go runtime.SetFinalizer(b, nil)                // want `runtime\.SetFinalizer bypasses`
}

func Goroutines() int { return runtime.NumGoroutine() }
