package finalizerwatch

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// crashHelperEnv makes the test binary, run again by TestUserFinalizerPanic,
// register a panicking finalizer and wait for it to crash the program.
const crashHelperEnv = "GCPROBE_FINALIZER_CRASH_HELPER"

func TestCrashHelperProcess(t *testing.T) {
	mode := os.Getenv(crashHelperEnv)
	if mode == "" {
		t.Skip("helper process only")
	}
	var w *Watcher
	if mode == "watched" {
		w, _ = New()
	}
	for range 10 {
		o := &thing{}
		if w != nil {
			w.SetFinalizer(o, func(*thing) { panic("user finalizer failed") })
		} else {
			runtime.SetFinalizer(o, func(*thing) { panic("user finalizer failed") })
		}
	}
	testkit.AwaitGC(t, 20*time.Second, "the panicking finalizer to crash the program", func() bool { return false })
}

// A user's finalizer that panics crashes the program exactly as it does
// without the watcher: same exit status, same panic message, and the
// panicking function on top of the goroutine's stack.
func TestUserFinalizerPanicCrashesAsWithoutTheWatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary twice")
	}
	run := func(mode string) (int, string) {
		return testkit.RunTest(t, "TestCrashHelperProcess", []string{crashHelperEnv + "=" + mode})
	}
	rawCode, rawOut := run("raw")
	code, out := run("watched")
	if code != rawCode || code != 2 {
		t.Fatalf("exit status %d with the watcher, %d without (want 2)\n%s", code, rawCode, out)
	}
	for _, o := range []string{rawOut, out} {
		if !strings.Contains(o, "panic: user finalizer failed") || !strings.Contains(o, "goroutine ") {
			t.Fatalf("output lacks the panic:\n%s", o)
		}
	}
	// The stack shows the user's finalizer, called from the watcher's
	// wrapper, on the runtime's finalizer goroutine.
	if !strings.Contains(out, "TestCrashHelperProcess.func1") || !strings.Contains(out, "finalizerwatch.runFinalizer") {
		t.Fatalf("stack of the watched crash:\n%s", out)
	}
}
