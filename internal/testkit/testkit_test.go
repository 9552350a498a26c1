package testkit

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the failure and
// returns instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

func TestMarkerLine(t *testing.T) {
	if got := MarkerLine(t, "testkit_test.go", "here"); got != 38 {
		t.Fatalf("MarkerLine = %d, want 38", got)
	}
	f := &fatalRecorder{TB: t}
	MarkerLine(f, "testkit_test.go", "nowhere")
	if !f.failed {
		t.Fatal("a missing marker did not fail the test")
	}
}

var _ = "planted" // marker: here

// TestAwaitGCRunsFinalizers: with the collector off, only a forced cycle
// collects an object, so a condition that waits for its finalizer holds
// only if AwaitGC runs GC cycles.
func TestAwaitGCRunsFinalizers(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var ran atomic.Bool
	dropWithFinalizer(&ran)
	f := &fatalRecorder{TB: t}
	AwaitGC(f, 20*time.Second, "the finalizer", ran.Load)
	if f.failed {
		t.Fatalf("AwaitGC failed: %s", f.msg)
	}
	if !ran.Load() {
		t.Fatal("AwaitGC returned before the finalizer ran")
	}
}

// dropWithFinalizer allocates an object whose finalizer sets ran, and
// keeps no reference to it.
//
//go:noinline
func dropWithFinalizer(ran *atomic.Bool) {
	p := new([16]*int)
	runtime.SetFinalizer(p, func(*[16]*int) { ran.Store(true) })
}

// TestAwaitGCTimesOut: a condition that never holds fails the test once
// the time is up, naming what it waited for.
func TestAwaitGCTimesOut(t *testing.T) {
	f := &fatalRecorder{TB: t}
	start := time.Now()
	AwaitGC(f, 50*time.Millisecond, "the impossible", func() bool { return false })
	if !f.failed {
		t.Fatal("a condition that never holds did not fail the test")
	}
	if !strings.Contains(f.msg, "the impossible") {
		t.Fatalf("failure %q does not name what it waited for", f.msg)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("failed after %v, before the 50ms were up", d)
	}
}

// TestPollTimesOut: Poll fails the test once the time is up, naming what
// it waited for.
func TestPollTimesOut(t *testing.T) {
	f := &fatalRecorder{TB: t}
	Poll(f, 20*time.Millisecond, "the impossible", func() bool { return false })
	if !f.failed || !strings.Contains(f.msg, "the impossible") {
		t.Fatalf("failed %v with %q, want a failure naming the impossible", f.failed, f.msg)
	}
}

// TestPollEvery: it checks until cond holds, resting every between
// checks, and on failure prints what the last check saw.
func TestPollEvery(t *testing.T) {
	f := &fatalRecorder{TB: t}
	n := 0
	PollEvery(f, 10*time.Second, time.Millisecond, "the third check", func() (bool, string) {
		n++
		return n == 3, ""
	})
	if f.failed || n != 3 {
		t.Fatalf("failed %v (%q) after %d checks, want success at the third", f.failed, f.msg, n)
	}

	f, n = &fatalRecorder{TB: t}, 0
	PollEvery(f, 30*time.Millisecond, 10*time.Millisecond, "the impossible", func() (bool, string) {
		n++
		return false, fmt.Sprintf("check %d", n)
	})
	if !f.failed {
		t.Fatal("a condition that never holds did not fail the test")
	}
	if !strings.Contains(f.msg, "the impossible") || !strings.Contains(f.msg, fmt.Sprintf("last seen:\ncheck %d", n)) {
		t.Fatalf("failure %q does not name what it waited for and what the last check saw", f.msg)
	}
	// Checks at 0, 10, 20 and 30ms or later: the fourth is past the deadline.
	if n > 4 {
		t.Fatalf("%d checks in 30ms at one per 10ms", n)
	}
}
