package finalizertest_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gcprobe/probe/finalizertest"
	"github.com/gcprobe/probe/finalizerwatch"
)

type conn struct {
	fd  int
	buf [32]byte
}

func (c *conn) close() {}

// Find checks finalizerwatch.Default unless told otherwise. A dropped
// object's finalizer runs, so nothing leaks.
func ExampleFind() {
	c := &conn{fd: 3}
	finalizerwatch.SetFinalizer(c, (*conn).close)
	c = nil // dropped: its finalizer will run
	fmt.Println(finalizertest.Find())
	// Output: <nil>
}

// A LeakError names each leaking call site.
func ExampleLeakError() {
	w, err := finalizerwatch.New()
	if err != nil {
		panic(err)
	}
	defer w.Close()
	var pool []*conn // never emptied: the leak
	for fd := range 2 {
		c := &conn{fd: fd}
		w.SetFinalizer(c, (*conn).close)
		pool = append(pool, c)
	}

	err = finalizertest.Find(finalizertest.WithWatcher(w))
	var le *finalizertest.LeakError
	if errors.As(err, &le) {
		for _, l := range le.Leaks {
			fmt.Println(l.Kind, filepath.Base(l.Site.File), "leaked", l.Leaked)
		}
	}
	runtime.KeepAlive(pool)
	// Output: finalizer example_test.go leaked 2
}

// VerifyNone, deferred at the top of a test with a baseline taken then,
// fails the test if it leaves finalizers or cleanups behind.
func ExampleVerifyNone() {
	_ = func(t *testing.T) {
		defer finalizertest.VerifyNone(t, finalizertest.IgnoreCurrent())
		// ... the test ...
	}
}

// VerifyTestMain checks a whole package's tests at once, parallel ones
// included.
func ExampleVerifyTestMain() {
	_ = func(m *testing.M) { // TestMain
		finalizertest.VerifyTestMain(m)
	}
}
