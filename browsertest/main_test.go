package browsertest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's finalizer and cleanup goroutines show up while
		// they run a callback: goleak v1.3.0 does not know them.
		goleak.IgnoreAnyFunction("runtime.runCleanups"),
		goleak.IgnoreAnyFunction("runtime.runFinalizers"))
}
