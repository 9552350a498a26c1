package finalizerwatch

import (
	"runtime"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// A finalizer that blocks is named by Running, with how long it has run,
// while the finalizers queued behind it wait; once it returns, nothing is
// running.
func TestRunningNamesABlockingFinalizer(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	started := make(chan struct{})
	func() {
		w.SetFinalizer(&thing{}, func(*thing) { close(started); <-release }) // marker: blocking-finalizer
		for range 1000 {
			w.SetFinalizer(&thing{}, func(*thing) {}) // marker: queued-behind
		}
	}()
	line := testkit.MarkerLine(t, "running_test.go", "blocking-finalizer")
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-started:
		default:
			if time.Now().After(deadline) {
				t.Fatal("the blocking finalizer did not start")
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	// It runs, and keeps running: For grows.
	var first time.Duration
	for {
		r := w.Running()
		if len(r) != 1 || r[0].Site.Line != line || r[0].Kind != KindFinalizer {
			t.Fatalf("Running = %+v, want the finalizer on line %d", r, line)
		}
		if first == 0 {
			first = r[0].For
		} else if r[0].For > first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("For stays at %v", first)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	released = true
	await(t, "the blocked finalizer and those behind it to finish", func() bool {
		return len(w.Running()) == 0 && w.Totals(KindFinalizer).Executed == 1001
	})
}

// Cleanups can run concurrently; a blocking one is named likewise.
func TestRunningNamesABlockingCleanup(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	defer close(release)
	AddCleanupTo(w, &thing{}, func(int) { <-release }, 0) // marker: blocking-cleanup
	line := testkit.MarkerLine(t, "running_test.go", "blocking-cleanup")
	await(t, "the cleanup to run", func() bool {
		r := w.Running()
		return len(r) == 1 && r[0].Site.Line == line && r[0].Kind == KindCleanup
	})
}
