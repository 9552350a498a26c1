package finalizerwatch_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
)

type conn struct {
	fd   int
	peer *conn
}

var pool []*conn // a cache that is never emptied: the leak

func dial(w *finalizerwatch.Watcher, fd int) *conn {
	c := &conn{fd: fd}
	w.SetFinalizer(c, func(c *conn) { /* close(c.fd) */ })
	return c
}

func Example() {
	w, err := finalizerwatch.New()
	if err != nil {
		panic(err)
	}
	defer w.Close()

	for i := range 100 {
		c := dial(w, i)
		if i%10 == 0 {
			pool = append(pool, c) // kept: 10 connections never finalized
		}
	}

	// Let a few GC cycles pass (a real program just keeps running).
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{})
	for start := sn.Cycles[finalizerwatch.KindFinalizer]; sn.Cycles[finalizerwatch.KindFinalizer] < start+5; {
		runtime.GC()
		time.Sleep(time.Millisecond)
		w.Read(&sn, finalizerwatch.ReadOptions{})
	}

	// The site most likely to leak, with its stack.
	w.Read(&sn, finalizerwatch.ReadOptions{TopK: 1, Stacks: true})
	for _, s := range sn.Top {
		fmt.Printf("%s %s: registered %d, outstanding %d, suspect %d\n",
			s.Kind, filepath.Base(s.Site.File), s.Registered, s.Outstanding, s.Suspect)
	}
	// Output:
	// finalizer example_test.go: registered 100, outstanding 10, suspect 10
}

func ExampleAddCleanup() {
	type buffer struct{ data []byte }
	released := make(chan int, 1)
	b := &buffer{data: make([]byte, 1<<10)}
	c := finalizerwatch.AddCleanup(b, func(handle int) { released <- handle }, 7)
	c.Stop() // b is returned to its owner: no cleanup needed after all
	fmt.Println("stopped")
	// Output: stopped
}

// In a binary built in the runtime build mode, with a probe (or a Watcher
// attached to the runtime) running, the lines that call runtime.GC or
// debug.FreeOSMemory, most calls first.
func ExampleForcedGCSites() {
	if !finalizerwatch.RuntimeModeForcedGC() {
		fmt.Println("forced GC cycles are not counted by line: build with finalizercheck -runtime's flags")
		return
	}
	for _, s := range finalizerwatch.ForcedGCSites(nil) {
		fmt.Printf("%d calls at %s\n", s.Calls, s.Site)
	}
}
