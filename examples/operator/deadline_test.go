package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The tests that build this operator again (TestDepsBuild with client-go
// rewritten, TestRuntimeBuild with a patched runtime, the standard library
// rebuilt) run the go command for minutes on a cold cache, more under
// load: one binary of this package took 589 s of go test's default
// -timeout of 10 minutes. The README's command gives -timeout 30m. With
// less, such a test skips at its start, or stops its go command before
// the timeout, saying why, instead of being killed with the whole binary.

// timeoutAdvice is what to run instead.
const timeoutAdvice = "run with -timeout 30m, as the README does: (cd examples/operator && go test -race -count=1 -timeout 30m ./...)"

// deadlineMargin is kept between a stopped go command and go test's
// deadline, for the test to report and clean up.
const deadlineMargin = 30 * time.Second

// needTime skips t when go test's -timeout leaves less than need for it,
// naming what takes that long.
func needTime(t *testing.T, need time.Duration, what string) {
	t.Helper()
	if left, ok := timeLeft(t); ok && left < need {
		t.Skipf("skipping: %s takes up to %v on a cold cache under load, and go test's -timeout leaves %v; %s",
			what, need, left.Round(time.Second), timeoutAdvice)
	}
}

// timeLeft returns how long t may still run before go test's -timeout
// kills the binary, and false when there is no timeout.
func timeLeft(t *testing.T) (time.Duration, bool) {
	d, ok := t.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}

// command returns a command that ends before go test's deadline (an
// interrupt, which the go command passes on to the compilers it runs,
// then a kill) and the context that says whether it was ended so.
func command(t *testing.T, name string, args ...string) (*exec.Cmd, context.Context) {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-deadlineMargin))
		t.Cleanup(cancel)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, ctx
}

// TestBuildsSkipWithoutTime runs this test binary again with go test's
// default -timeout cut to a minute: the tests that build the operator
// again skip at once, saying how to run them, rather than build until the
// timeout kills the binary.
func TestBuildsSkipWithoutTime(t *testing.T) {
	if os.Getenv(runtimeBuildEnv) != "" || os.Getenv(depsBuildEnv) != "" {
		t.Skip("skipping: runs the builds' tests, not in a build they prepared")
	}
	cmd, _ := command(t, os.Args[0], "-test.run=^(TestDepsBuild|TestRuntimeBuild)$", "-test.v", "-test.short=false", "-test.timeout=1m")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	for _, test := range []string{"TestDepsBuild", "TestRuntimeBuild"} {
		if !strings.Contains(string(out), "--- SKIP: "+test) {
			t.Errorf("%s did not skip with a minute left:\n%s", test, out)
		}
	}
	if !strings.Contains(string(out), "-timeout 30m") {
		t.Errorf("the skips do not say to run with -timeout 30m:\n%s", out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("skipping took %v", d)
	}
}
