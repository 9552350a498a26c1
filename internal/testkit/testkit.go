// Package testkit holds helpers that gcprobe's tests share. Nothing outside
// this module's tests imports it.
package testkit

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// MarkerLine returns the line of file (relative to the test's package
// folder) that ends with the comment "// marker: name": where a test
// plants a registration whose reported line it then checks. It fails the
// test if there is no such line.
func MarkerLine(t testing.TB, file, name string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(l, "// marker: "+name) {
			return i + 1
		}
	}
	t.Fatalf("no marker %q in %s", name, file)
	return 0
}

// SyncBuffer is a bytes.Buffer that a logger, a child process's output and
// a test can share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// AtPath calls fn depth frames down through ViaA and ViaB, choosing
// between them by the bits of path: every path is a distinct stack, so
// that with full stacks each registration made in fn is a ledger entry of
// its own.
func AtPath(path uint, depth int, fn func()) { ViaA(path, depth, fn) }

// ViaA is one of the two frames AtPath descends through.
//
//go:noinline
func ViaA(path uint, depth int, fn func()) { via(path, depth, fn) }

// ViaB is the other.
//
//go:noinline
func ViaB(path uint, depth int, fn func()) { via(path, depth, fn) }

func via(path uint, depth int, fn func()) {
	switch {
	case depth == 0:
		fn()
	case path&1 == 0:
		ViaA(path>>1, depth-1, fn)
	default:
		ViaB(path>>1, depth-1, fn)
	}
}

// Poll calls cond until it holds, and fails the test if it does not within
// the given time. The short sleep between calls only paces the loop; the
// deadline is what the test waits on.
func Poll(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	wait(t, within, what, seenNothing(cond), restMillisecond)
}

// AwaitGC is Poll for conditions that only a GC cycle can make true: an
// object to be collected, a finalizer or cleanup to run, a clock that
// counts cycles to advance. It checks cond first; while cond does not
// hold, it runs one GC cycle (runtime.GC) and sleeps a millisecond, so
// that the finalizer and cleanup goroutines get to run what the cycle
// queued, and checks again. That is the one pacing of the tests' GC
// waits: at most one forced cycle per check, checks as fast as cycles
// end. It fails the test, naming what, if cond does not hold within the
// given time.
func AwaitGC(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	wait(t, within, what, seenNothing(cond), func() {
		runtime.GC()
		time.Sleep(time.Millisecond)
	})
}

// PollEvery is Poll for the end-to-end tests, whose every check costs the
// program under test something: a scrape of its endpoints, a parse of its
// whole output, a command run against it. It rests every between checks,
// not a millisecond, so that the waiting does not load what it waits on;
// and cond returns, with whether it holds, what it saw, which the failure
// prints.
func PollEvery(t testing.TB, within, every time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	wait(t, within, what, cond, func() { time.Sleep(every) })
}

// wait is the loop of Poll, AwaitGC and PollEvery: cond, then rest, until
// cond holds or the deadline has passed.
func wait(t testing.TB, within time.Duration, what string, cond func() (bool, string), rest func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if seen == "" {
				t.Fatalf("timed out after %v waiting for %s", within, what)
			} else {
				t.Fatalf("timed out after %v waiting for %s; last seen:\n%s", within, what, seen)
			}
			return
		}
		rest()
	}
}

func seenNothing(cond func() bool) func() (bool, string) {
	return func() (bool, string) { return cond(), "" }
}

func restMillisecond() { time.Sleep(time.Millisecond) }

// RunTest runs the test function named test of the running test binary
// again, alone, in a child process whose environment is this one's plus
// env (KEY=value pairs) and whose flags add args, and returns its exit
// code and its output (stdout and stderr). It is for the tests that need
// a fresh process, or one they may end. It fails t if the process cannot
// be started.
func RunTest(t testing.TB, test string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^" + test + "$", "-test.count=1"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("running %s in a child process: %v", test, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}
