package finalizertest

import (
	"fmt"
	"io"
	"os"
)

// TestingM is the part of *testing.M that VerifyTestMain uses.
type TestingM interface {
	Run() int
}

// Replaced by the package's own tests.
var (
	osExit           = os.Exit
	stderr io.Writer = os.Stderr
)

// VerifyTestMain runs a package's tests and, if they pass, checks with
// Find that they leaked no finalizer or cleanup; it then exits with the
// tests' code, or 1 if Find reports a problem (printed to standard error).
// Call it from TestMain:
//
//	func TestMain(m *testing.M) {
//		finalizertest.VerifyTestMain(m)
//	}
//
// Checking once after all tests is the way to cover parallel tests (see
// the package documentation). Invalid options are reported before any test
// runs. To combine with goleak.VerifyTestMain, which also runs the tests
// and exits, pass it WrapTestingM(m) instead.
func VerifyTestMain(m TestingM, opts ...Option) {
	osExit(WrapTestingM(m, opts...).Run())
}

// WrapTestingM returns a TestingM whose Run runs m's tests and then, if
// they passed, Find with opts, turning a leak into exit code 1 with the
// report on standard error. It lets another TestMain helper run the
// tests, for instance goleak:
//
//	goleak.VerifyTestMain(finalizertest.WrapTestingM(m))
func WrapTestingM(m TestingM, opts ...Option) TestingM {
	return &wrappedM{m: m, opts: opts}
}

type wrappedM struct {
	m    TestingM
	opts []Option
}

func (w *wrappedM) Run() int {
	c, err := buildConfig(w.opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	code := w.m.Run()
	if code != 0 {
		return code
	}
	if err := c.find(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
